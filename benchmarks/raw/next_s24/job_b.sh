#!/usr/bin/env bash
# Prepared in session 23 for the next session, about 420 s (issue 14): session 23 B3 read a
# persistent grid 1.011x the shipped Hopper backward config without causal masking (head dim 64
# 1.00-1.03x, 128 0.98-1.02x) and 0.85x causal, 3 alternating rounds: within the spread. Five
# rounds here, head dim 64 and 128, then the grid on the shipped defaults beside cuDNN and FA2.
# If persistent holds >= 2% without causal masking, give hopper_bwd.CONFIGS a (head dim, causal)
# key (the causal configs stay as they are).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s24/job_b.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
S=2,2,1,168,1,0,0,1,1,1,0; P=2,2,1,168,1,0,1,1,1,1,0; P3=2,3,1,168,1,0,1,1,1,1,0
timeout 280 python3 benchmarks/hopper_bwd.py --out $W --budget 250 --check-timeout 70 --rounds 5 --rep 25 \
  --configs 64:$S 64:$P 64:$P3 128:$S 128:$P > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|summary|Error|budget" $W/hopper_bwd.txt | cut -c1-900
FLASHGEN_IMPL=flashgen timeout 120 python3 benchmarks/bwd_grid.py --out $W --budget 100 --modes fast,det --fa2 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
