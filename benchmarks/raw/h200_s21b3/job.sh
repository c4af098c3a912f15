#!/usr/bin/env bash
# Prepared in session 20 for the next session, about 260 s (issues 13, 14): issues 13/14's grid
# with SDPA's FlashAttention-2 backend timed beside cuDNN and flashgen in one process (the
# issues' second baseline, not in sessions 19-20's grid runs): forward alone and
# forward+backward, fast and deterministic modes. Run after any change job_a/job_b ship.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s21/job_d.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 240 python3 benchmarks/bwd_grid.py --out $W --budget 215 --modes fast,det --fa2 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -E '"ok": false' $W/bwd_grid.txt | head -3 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
