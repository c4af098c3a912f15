#!/usr/bin/env bash
# Session 34 B5 (issue 16), about 300 s, carrying .whl, with the previous tree's flashgen/ and
# templates/ in old_tree/ (`git archive b9b83f0 flashgen templates | tar x -C old_tree`, not
# committed):
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b5/job.sh
# ALiBi's per-key term in the Hopper forward from a shared-memory table of key indices and a
# per-tile shift of the row maximum (no int-to-float conversion a key). 1. GPU tests of every
# ALiBi case. 2. masks.py's ALiBi rows at head dim 128 (B4 H16/4 4k), forward and
# forward+backward, the old and the new tree in alternating processes, twice.
# Results in $OUT/b5.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests -k "alibi" > $W/tests.txt 2>&1
stamp "alibi tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
for rep in 1 2; do
  for tree in old new; do
    root=$PWD; [ $tree = old ] && root=$PWD/old_tree
    PYTHONPATH=/tmp/site:$root timeout 70 python3 benchmarks/masks.py --no-check --dirs fwd,fwd+bwd \
      --rounds 3 --budget 60 --shape 4,16,4,4096,128 --only alibi_causal,alibi_full \
      --out $W/alibi_${tree}_$rep.csv > $W/alibi_${tree}_$rep.txt 2>&1
    stamp "$tree $rep rc=$?"; grep -h "^name=" $W/alibi_${tree}_$rep.txt | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//'
  done
done
cd $W && tar czf $OUT/b5.tgz .
