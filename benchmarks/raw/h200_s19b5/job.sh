#!/usr/bin/env bash
# Session 19 B5: the Hopper backward's GPU tests (shipped configs now dQ by TMA reduce-add),
# then issues 13/14's grid with FLASHGEN_BWD_KIND=hopper: "fast" runs the one-pass Hopper
# kind (two consumers sharing dS, dQ by TMA reduce-add) on every shape, "det" the split kind
# (with the Hopper dK/dV kernel at head dim 128 non-causal), cuDNN in the same process.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s19b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_hopper_bwd.py > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-400
FLASHGEN_BWD_KIND=hopper FLASHGEN_IMPL=flashgen timeout 170 python3 benchmarks/bwd_grid.py --out $W --budget 150 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -E '"ok": false' $W/bwd_grid.txt | head -3 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -24 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
