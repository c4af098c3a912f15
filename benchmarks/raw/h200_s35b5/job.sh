#!/usr/bin/env bash
# Session 35 B5 (issue 16), about 300 s, carrying .whl and old_tree/ (the tree before the change:
# `git archive 3b48d43 flashgen templates tuning_db | tar x -C old_tree`, not committed):
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s35b5/job.sh
# The Hopper forward's dense mask tile (a mask tensor that varies along the query rows) loaded
# 16 bytes a thread in whole 128-byte lines and moved into the scores' layout through the
# consumer's output buffer (B3: the loads in the scores' layout cost as much as the products).
# B4 timed the default family, which for a dense mask is the portable one (hopper.AUTO_MASKS):
# here FLASHGEN_FWD_FAMILY=hopper, masks.py's dense rows at head dim 128, B4 H16/4 4k, forward,
# old and new tree alternating, twice; the first new run checks against float64 too. Results
# in $OUT/b5.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
export FLASHGEN_FWD_FAMILY=hopper
ROWS=attn_mask_bias_causal,attn_mask_bool_b1nn
for rep in 1 2; do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$PWD/old_tree
    check=--no-check; [ $tree$rep = new1 ] && check=
    PYTHONPATH=/tmp/site:$root timeout 90 python3 benchmarks/masks.py $check --dirs fwd \
      --rounds 3 --budget 80 --shape 4,16,4,4096,128 --only $ROWS \
      --out $W/masks_${tree}_$rep.csv > $W/masks_${tree}_$rep.txt 2>&1
    stamp "$tree $rep rc=$?"; grep -h "^name=\|max_abs\|FAIL\|err" $W/masks_${tree}_$rep.txt | grep -v Warn | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//' | cut -c1-200
  done
done
cd $W && tar czf $OUT/b5.tgz .
