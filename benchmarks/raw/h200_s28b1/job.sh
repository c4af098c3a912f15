#!/usr/bin/env bash
# Session 28 B1 (issues 13, 14, 15), about 450 s: (1) the Hopper families' GPU tests on this
# tree (hopper_bwd.SHORT_CONFIGS: head dim 128 without causal masking on a persistent grid up
# to 4k keys, any group; the forward's hd128 non-causal 16k record persistent); (2) the grid by
# session 26 B6's method (five alternating rounds, fast only, all 18 shapes) against session 27
# B5's reading of the previous defaults; (3) the launch path's host time.
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b1/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py tests/kernels/test_hopper.py -p no:randomly > $W/gpu_tests.txt 2>&1
stamp "GPU tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_tests.txt | tail -6 | cut -c1-400
FLASHGEN_IMPL=flashgen timeout 200 python3 benchmarks/bwd_grid.py --out $W --budget 170 --modes fast --rounds 5 > $W/bwd_grid.txt 2>&1
stamp "grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -22 $W/bwd_grid_table.md
timeout 40 python3 benchmarks/host_time.py --rounds 5 > $W/host_time.txt 2>&1
stamp "host_time rc=$?"; tail -14 $W/host_time.txt | cut -c1-200
