#!/usr/bin/env bash
# Session 20, batch B6 (issue 14), run as one inline command while B5's machine was still warm:
# the grid's deterministic mode with the split kind's Hopper dK/dV kernel staging its statistics
# in shared memory (hopper_bwd.DKDV_CONFIG patched in-process to stats_smem=True), to compare
# with B5's deterministic column (same tree 67ac1e7). Output: bwd_grid.json/.txt, table.md.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
mkdir -p $OUT/w
FLASHGEN_IMPL=flashgen timeout 170 python3 -c "
import sys, dataclasses, runpy
import flashgen.kernels.hopper_bwd as h
h.DKDV_CONFIG = dataclasses.replace(h.DKDV_CONFIG, stats_smem=True)
sys.argv = ['bwd_grid.py', '--out', '$OUT/w', '--budget', '120', '--modes', 'det']
runpy.run_path('benchmarks/bwd_grid.py', run_name='__main__')
" > $OUT/w/bwd_grid.txt 2>&1
echo rc=$?
python3 benchmarks/bwd_grid.py --table $OUT/w/bwd_grid.json > $OUT/w/table.md 2>&1; tail -24 $OUT/w/table.md
