#!/usr/bin/env bash
# Session 20, batch B5 (issue 14): the shipped Hopper backward configs with stats_smem and the
# hopper kind by default for causal head dim 128 from 4k keys (hopper_bwd.AUTO, from B4): the
# whole GPU suite, then issues 13/14's grid (fast and deterministic modes beside cuDNN), as
# session 19 B6 ran them.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -12 | cut -c1-300
FLASHGEN_IMPL=flashgen timeout 160 python3 benchmarks/bwd_grid.py --out $W --budget 140 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -E '"ok": false' $W/bwd_grid.txt | head -3 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -24 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
