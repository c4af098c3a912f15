#!/usr/bin/env bash
# Session 18 B9: key_hull as one kernel (hull_kernel.py) against the torch ops (old_tree =
# 55bad5e): the key-padding rows of masks.py, forward and forward+backward, one process each,
# new then old; first the GPU tests of key_hull and the key-padding masks.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b9/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_attn_mask.py -k "hull or key_padding" > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -6 | cut -c1-300
ROWS=attn_mask_add_pad,attn_mask_bool_pad
for tree in new old; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 45 python3 benchmarks/masks.py --only $ROWS --rounds 2 --no-check --out $W/masks_${tree}.csv > $W/masks_${tree}.txt 2>&1
  stamp "masks $tree rc=$?"; grep -E "name=" $W/masks_${tree}.txt | sed -E 's/ b=4.*pairs_frac=[0-9.]*//' | cut -c1-200
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
