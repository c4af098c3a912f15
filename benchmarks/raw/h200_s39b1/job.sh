#!/usr/bin/env bash
# Prepared in session 38 (its device time was spent). Session 39 ran the default part as B1
# (`ed8c527`: 361 passed, suite.txt); `rowkeys` did not run (the device was taken back; the
# A/B moved to next_s40/job.sh rowkeys); `alibi` was not run.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s39b1/job.sh         (carrying .whl; ~350-450 s)
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s39b1/job.sh alibi   (~300 s)
# default: the whole GPU suite on session 38's final tree (its kernel changes: the Hopper
#   backward's dropout row keys, B2; ALiBi's per-key term on the tensor cores with O staged in
#   the Q buffer, B5; each ran its own GPU tests, not the whole suite).
# alibi: what the tensor-core term gives where session 38 did not measure it. (1) Head dim 64,
#   whose ALiBi runs the portable forward because the Hopper one read 1.07-1.28x slower
#   (session 34 B4; hopper.AUTO_MASKS["alibi"] is {128}): both families in alternating
#   processes, twice. (2) Head dim 128 at 1k and 16k keys against the unmasked kernel (B5 read
#   4k only). Forward only; float64 checks on the first run of each shape.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s39b1/job.sh rowkeys (~250 s)
# rowkeys: session 38's last kernel change, landed after its device time was spent and never
#   timed (split_rowkeys.patch: the split backward's dK/dV kernels read dropout's row keys from
#   the preprocess instead of hashing them, static SASS 15-18% fewer instructions): the tree
#   before it (the patch reversed in old_tree/) against this one, masks.py's dropout rows
#   forward+backward at BERT's 512 keys (the split kind runs dropout below 1k), in alternating
#   processes twice; the new tree's first run checks against float64.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = rowkeys ]; then
  mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
  (cd old_tree && patch -s -p1 -R < ../benchmarks/raw/h200_s39b1/split_rowkeys.patch) || { echo "patch failed"; exit 1; }
  for shape in 32,12,12,512,64 16,16,4,512,128; do
    mkdir -p $W/${shape//,/_}
    t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W/${shape//,/_} dropout_full,dropout_causal $shape 2
  done
  cd $W && tar czf $OUT/rowkeys.tgz . && exit 0
fi
if [ "${1:-}" = alibi ]; then
  for rep in 1 2; do
    for fam in portable hopper; do
      check=--no-check; [ $rep$fam = 1hopper ] && check=
      FLASHGEN_FWD_FAMILY=$fam timeout 80 python3 benchmarks/masks.py $check --dirs fwd --rounds 3 \
        --budget 70 --shape 4,32,8,4096,64 --only alibi_causal,alibi_full \
        --out $W/d64_${fam}_$rep.csv > $W/d64_${fam}_$rep.txt 2>&1
      stamp "d64 $fam $rep rc=$?"; grep -h "^name=" $W/d64_${fam}_$rep.txt | sed 's/ b=[0-9].*dir=/ /' | cut -c1-160
    done
  done
  for shape in 16,16,4,1024,128 1,16,4,16384,128; do
    timeout 90 python3 benchmarks/masks.py --dirs fwd --rounds 3 --budget 80 --shape $shape \
      --only alibi_causal,alibi_full > $W/d128_${shape//,/_}.txt 2>&1
    stamp "d128 $shape rc=$?"; grep -h "^check\|^name=" $W/d128_${shape//,/_}.txt | sed 's/ b=[0-9].*dir=/ /' | cut -c1-200
  done
  cd $W && tar czf $OUT/alibi.tgz . && exit 0
fi
timeout 560 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20
