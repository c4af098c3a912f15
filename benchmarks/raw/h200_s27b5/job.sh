#!/usr/bin/env bash
# Session 27 B5 (issue 14; prepared, not run this session): the GPU suite on the session's final
# tree (the last full run was session 26 B3, before SHORT_MHA_CONFIGS and AUTO from 1k keys),
# then the grid by session 26 B6's method (five alternating rounds, fast only: the method that
# read 1.3-2.5% below the three-round one), all 18 shapes (B2 did not reach GQA 16k causal).
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s27b5/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $W/gpu_suite.txt 2>&1
stamp "GPU suite rc=$?"; tail -4 $W/gpu_suite.txt
FLASHGEN_IMPL=flashgen timeout 200 python3 benchmarks/bwd_grid.py --out $W --budget 170 --modes fast --rounds 5 > $W/bwd_grid.txt 2>&1
stamp "grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -4 $W/bwd_grid_table.md
