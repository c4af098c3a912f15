#!/usr/bin/env bash
# Session 17, batch B2: the Hopper forward with lengths alone issuing the next item's first
# QK^T during the epilogue (prefetch, daa7c72): its GPU tests (tests/kernels/test_hopper.py),
# then masks.py's padding rows new / old / new (old = 9e54197's flashgen/ and templates/ in
# old_tree/, first on PYTHONPATH), the masked and unmasked kernel alternating 3 readings each;
# then the issue 13/14 grid (flashgen's own kernels against cuDNN, fast and deterministic).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s17b2/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py > $W/pytest_hopper.txt 2>&1
stamp "pytest hopper rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper.txt | tail -12 | cut -c1-300
ROWS=pad_right_causal,pad_left_causal,pad_right_full,pad_left_full
for tree in new old new2; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; CHK=--no-check; else PP=/tmp/site:$PWD; CHK=; fi
  PYTHONPATH=$PP timeout 100 python3 benchmarks/masks.py --only $ROWS $CHK --budget 85 --out $W/masks_$tree.csv > $W/masks_$tree.txt 2>&1
  stamp "masks $tree rc=$?"; grep -E "check|name=|readings|Error|failed" $W/masks_$tree.txt | cut -c1-330
done
FLASHGEN_IMPL=flashgen timeout 225 python3 benchmarks/bwd_grid.py --out $W --budget 195 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -4
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -26 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
