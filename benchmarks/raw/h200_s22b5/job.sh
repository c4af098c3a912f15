#!/usr/bin/env bash
# Session 22 B5 (issues 14, 15), about 210 s: the backward grid on the final defaults of this
# session (hopper_bwd.AUTO takes head dim 64 without causal masking from 4k keys, so its 1k
# shape runs the split kind) beside cuDNN and FA2 in one process, then a second reading of the
# launch path's host time.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s22b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 175 python3 benchmarks/bwd_grid.py --out $W --budget 155 --modes fast,det --fa2 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
timeout 30 python3 benchmarks/host_time.py --rounds 5 > $W/host_time.txt 2>&1
stamp "host_time rc=$?"; tail -20 $W/host_time.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
