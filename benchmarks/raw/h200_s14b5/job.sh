#!/usr/bin/env bash
# Session 14, batch B5 (issue 16): the split backward with whole key ranges flagged too
# (padding.flag_dense): its GPU tests against float64 and masks.py's key-padding rows, this
# tree against old_tree/ (the tree with the forward change only, d24e36c), alternated new / old / new.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_attn_mask.py tests/kernels/test_hopper.py tests/kernels/test_padding.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -6 $W/pytest_gpu.txt | cut -c1-300
V=attn_mask_bool_pad,pad_right_full
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 150 python3 benchmarks/masks.py --only $V --budget 120 --out $W/masks_$r.csv > $W/masks_$r.txt 2>&1
  stamp "masks $r rc=$?"; grep -E "check|name=|Error" $W/masks_$r.txt | cut -c1-330
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
