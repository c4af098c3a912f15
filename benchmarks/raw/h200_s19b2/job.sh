#!/usr/bin/env bash
# Prepared in session 18 for the next session, about 240 s: issues 13 and 14's grid
# (flashgen's own kernels against cuDNN, forward and forward+backward, fast and deterministic;
# last read in session 17 B2: 1.012x / 0.887x / 0.880x), as session 17 B2 ran it. Run as
# FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s19/job_b.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 225 python3 benchmarks/bwd_grid.py --out $W --budget 195 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -4
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -26 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
