#!/usr/bin/env bash
# Session 26, batch B6 (issue 14), about 80 s: the grid with whole dQ products in turns at head dim 128,
# five alternating rounds a shape, no FA2 (B4's method; PLAIN_CONFIGS at head dim 128 edited to
# dq_turns with two dS slots in the working tree, committed after the run).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b6/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 280 python3 benchmarks/bwd_grid.py --out $W --budget 240 --modes fast,det --rounds 5 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -24 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
