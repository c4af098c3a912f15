#!/usr/bin/env bash
# Session 15, batch B3 (issue 16): the split backward with the whole-range test as predicated mask loads (no branch in
# its steps; this tree) against old_tree/ (026d54c, a branch in every step): GPU tests of masks,
# padding and the Hopper family; per-kernel and wall times of the key-padding rows
# (mask_kernels.py --wall); masks.py's rows, new/old/new.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_attn_mask.py tests/kernels/test_hopper.py tests/kernels/test_padding.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300
V=attn_mask_bool_pad,pad_right_full
for r in new old; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 100 python3 benchmarks/mask_kernels.py --wall --only $V > $W/mask_kernels_$r.txt 2>&1
  stamp "mask_kernels $r rc=$?"; grep -E "wall|attn_|ERROR" $W/mask_kernels_$r.txt | cut -c1-120
done
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 150 python3 benchmarks/masks.py --only $V --budget 120 --out $W/masks_$r.csv > $W/masks_$r.txt 2>&1
  stamp "masks $r rc=$?"; grep -E "name=|Error" $W/masks_$r.txt | cut -c1-330
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
