#!/usr/bin/env bash
# Session 35 B3 (issue 16), about 400 s, carrying .whl and old_tree/ (the previous tree's
# flashgen/, templates/ and tuning_db/: `git archive 3b48d43 flashgen templates tuning_db | tar x
# -C old_tree`, not committed):
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s35b3/job.sh
# The Hopper forward with a mask tensor loads each tile's part of it before waiting for the
# tile's QK^T (_mask_tile), not in the softmax after it. 1. The GPU tests of the Hopper forward.
# 2. masks.py's mask-tensor rows at head dim 128 (B4 H16/4 4k), forward, the old and the new
# tree in alternating processes, twice. Results in $OUT/b3.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/kernels/test_hopper.py > $W/tests.txt 2>&1
stamp "hopper tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
ROWS=attn_mask_bias_causal,attn_mask_bool_b1nn,attn_mask_bool_pad,attn_mask_bool_pad_causal,attn_mask_add_pad,window_causal_1024_boolpad
for rep in 1 2; do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$PWD/old_tree
    PYTHONPATH=/tmp/site:$root timeout 90 python3 benchmarks/masks.py --no-check --dirs fwd \
      --rounds 3 --budget 80 --shape 4,16,4,4096,128 --only $ROWS \
      --out $W/masks_${tree}_$rep.csv > $W/masks_${tree}_$rep.txt 2>&1
    stamp "$tree $rep rc=$?"; grep -h "^name=" $W/masks_${tree}_$rep.txt | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//'
  done
done
cd $W && tar czf $OUT/b3.tgz .
