#!/usr/bin/env bash
# Prepared in session 16 for the next session: re-read the bars of issues 13, 14 and 16 on the
# current kernels (last read in session 14): the issue 13/14 grid (flashgen's own kernels
# against cuDNN, forward and forward+backward, fast and deterministic modes), then every
# masks.py row. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_bars/job.sh carrying
# .whl (about 420 s); move it to benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 225 python3 benchmarks/bwd_grid.py --out $W --budget 195 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -6
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -26 $W/bwd_grid_table.md
timeout 210 python3 benchmarks/masks.py --budget 190 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|allocator|Error|failed" $W/masks.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
