#!/usr/bin/env bash
# Session 28 B4 (issue 14; run as one command line, kept here split), about 80 s: the grid with
# fast and deterministic modes beside cuDNN and FA2 in one run (session 26 B7's method, three
# rounds), all 18 shapes, on this session's defaults.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 300 python3 benchmarks/bwd_grid.py --out $W --budget 270 --modes fast,det --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
stamp "grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1
