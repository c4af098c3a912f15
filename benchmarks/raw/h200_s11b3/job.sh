#!/usr/bin/env bash
# Session 11, batch B3 (issue 16): (a) dropout's 16-bit Philox draws (bf090ef) and (b) key-padding
# masks in the Hopper forward (MASK_PER_KEY, lengths + mask, the key hull where that family runs;
# merged in ca4fa7c), on the GPU: their GPU tests, masks.py's checks and speed, then masks.py on
# the tree before both (old_tree/, 00d7404) in a second process, back to back.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_dropout.py tests/kernels/test_hopper.py \
  tests/kernels/test_launch_gpu.py tests/kernels/test_attn_mask.py tests/kernels/test_padding.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -15
for tree in new old; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; CHK=--no-check; else PP=$PYTHONPATH; CHK=; fi
  PYTHONPATH=$PP timeout 170 python3 benchmarks/masks.py $CHK --only dropout_causal,attn_mask_bool_pad --dirs fwd,fwd+bwd \
    --budget 140 --out $W/masks_$tree.csv > $W/masks_$tree.txt 2>&1
  stamp "masks $tree rc=$?"; grep -v Warn $W/masks_$tree.txt | grep -E "name=|err|FAIL|check" | cut -c1-420
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
