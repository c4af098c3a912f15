#!/usr/bin/env bash
# Session 24, batch B4 (issue 14), about 450 s: the session's shipped defaults
# (hopper_bwd.PLAIN_CONFIGS: a persistent grid at head dim 64 without causal masking, a dynamic
# one with two dS slots at 64 causal, two dS slots at 128 causal): the whole GPU suite, then the
# forward+backward grid through the library path beside cuDNN and FA2 (issue 14's bar).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s24b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_suite.txt | tail -8 | cut -c1-500
FLASHGEN_IMPL=flashgen timeout 150 python3 benchmarks/bwd_grid.py --out $W --budget 130 --modes fast,det --fa2 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
