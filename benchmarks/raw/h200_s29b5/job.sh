#!/usr/bin/env bash
# Session 29 B5 (issues 13, 14) on 85b0d56 (late_wait shipped on head dim 128's 4k/16k forward
# records): the forward and forward+backward grid against cuDNN with FA2 in the same run, three
# alternating rounds.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_COMMIT=85b0d56 FLASHGEN_IMPL=flashgen timeout 330 python3 benchmarks/bwd_grid.py --out $W --budget 300 --modes fast --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1
