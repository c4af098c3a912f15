#!/usr/bin/env bash
# Session 26, batch B7 (issue 14), about 75 s, run inline on B6's warm machine (this file records
# the command): the grid with whole dQ products in turns at head dim 128 by B3's method (three
# alternating rounds, FA2 in the process).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 150 python3 benchmarks/bwd_grid.py --out $W --budget 120 --modes fast,det --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
echo rc=$?
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -8 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
