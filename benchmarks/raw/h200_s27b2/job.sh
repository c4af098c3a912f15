#!/usr/bin/env bash
# Session 27 B2 (issues 14, 15): the grid with the hopper backward kind from 1k keys everywhere
# (hopper_bwd.AUTO, from B8) and the dynamic persistent grid for MHA causal head dim 128 up to
# 4k keys (SHORT_MHA_CONFIGS, from B8's variants): bwd_grid.py by session 26 B7's method (three
# rounds with FA2); the backward records' SDPA comparison redone (recompare.py, as session 26's
# B10); the backward's GPU tests with the time left. Results are written straight under $OUT
# (a run cut short by the device budget still returns what it finished).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s27b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 150 python3 benchmarks/bwd_grid.py --out $W --budget 115 --modes fast,det --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
stamp "grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -6 $W/bwd_grid_table.md
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_hopper_bwd.py -k "shipped or auto or plan" > $W/gpu_tests_first.txt 2>&1
stamp "bwd GPU tests (first) rc=$?"; tail -3 $W/gpu_tests_first.txt
timeout 80 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json --out $OUT/nvidia-h200.json --json $W/recompare.json --direction bwd --rounds 3 --rep 40 > $W/recompare.txt 2>&1
stamp "recompare rc=$?"; grep -v Warn $W/recompare.txt | grep attn_ | cut -c1-120
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_hopper_bwd.py tests/kernels/test_bwd_kind.py > $W/gpu_tests.txt 2>&1
stamp "bwd GPU tests rc=$?"; tail -3 $W/gpu_tests.txt
