#!/usr/bin/env bash
# Session 25, batch B4 (issue 14), about 170 s: a second reading of the forward+backward grid
# on B3's tree (B3 read 0.999x cuDNN by geomean, three rounds a shape): five alternating rounds
# a shape, the default ("fast") and deterministic modes, forwards alone beside them.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s25b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 230 python3 benchmarks/bwd_grid.py --out $W --budget 200 --modes fast,det --rounds 5 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -25 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
