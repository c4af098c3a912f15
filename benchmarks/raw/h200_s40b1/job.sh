#!/usr/bin/env bash
# Prepared in session 39, run in session 40 (B1, 4d4242f): the default part, kvwindow, masktma,
# drop and fuzz ran (fuzz: every way hit its 135 s limit before its summary with 50 calls; now
# 20 calls a way), and tflops by hand with 7 rounds (its command below lacked a --vary, now
# given); alibi, rowkeys and drop64 are left.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/<dir>/job.sh [part], carrying .whl.
# The parts add up to more than a session's 1,800 s: by value, run the default first (without
# it nothing below is known correct on a GPU), then masktma, drop, fuzz, alibi, tflops, rowkeys,
# drop64.
#   (default) ~300 s: the whole GPU suite on session 39's final tree: its dropout draw change
#             (draw.patch: the first xorshift split between row and key, `kept`'s inline-PTX
#             select, the split backward's 1 / (1 - p) folded out of its per-score work) runs on
#             a GPU for the first time here, in every dropout kernel.
#   drop      ~400 s: draw.patch's A/B at 4k (B4 H16/4 d128): masks.py's dropout rows forward
#             and forward+backward, the tree before it (old_tree/) against this one in
#             alternating processes, twice with the default forward family (portable), once
#             with FLASHGEN_FWD_FAMILY=hopper (the Hopper forward lost its 308 bytes of spills:
#             does it now beat the portable one? session 22 read it 1.9x slower).
#   drop64    ~300 s: the same at head dim 64 (B4 H32/8), once per family.
#   rowkeys   ~350 s (split_rowkeys.patch regenerated in session 40: session 39's no longer
#             applied after draw.patch, its review commit having moved the preprocess launch;
#             tree A checked against float64 on the CPU): BERT's 512 keys, where the split
#             backward runs dropout: three trees in
#             alternating processes (A: before session 38's split row keys, split_rowkeys.patch
#             reversed on B; B: before draw.patch; C: this tree), dropout rows forward+backward,
#             two shapes; the first run of C checks against float64.
#   tflops    ~150 s: issue 13's 650 TFLOP/s row again (B1 H16 16k d128), eleven rounds.
#   alibi     ~300 s: session 38's prepared ALiBi timings, never run (h200_s39b1/job.sh alibi): head dim 64 (which keeps the
#             portable family, hopper.AUTO_MASKS["alibi"] = {128}) both families alternating
#             twice, now that the Hopper forward adds the per-key term on the tensor cores; head
#             dim 128 at 1k and 16k keys against the unmasked kernel.
#   fuzz      ~500 s: fuzz.py's random calls (shapes, dtypes, layouts, masks, windows, softcaps,
#             ALiBi, key lengths, learned biases; forward and gradients against float64) on the
#             GPU, four ways: the default families, the Hopper forward forced, forced with
#             FLASHGEN_MASK_TMA=1, and the default families with dropout.
#   kvwindow  ~200 s (added in session 40): kv_window.py, session 40's new routes against SDPA
#             given the equivalent boolean mask: a KV cache's sliding window (decode step, an
#             8-row draft, 1024-row prefill chunks), a two-sided band, a KV cache's causal & key
#             padding; outputs checked against SDPA's. Run it right after the default part: a
#             route slower than SDPA's here goes back to the mask tensor.
#   masktma   ~450 s: the Hopper forward's mask tiles by TMA (FLASHGEN_MASK_TMA=1, session
#             39, opt-in, never run): masks.py's dense-mask rows (T5-like bf16 bias [1, H, N, N]
#             causal; HF's boolean [B, 1, N, N]) forward at 4k, head dims 128 and 64, three
#             ways in separate processes: the default (portable family), the Hopper family
#             gathering the mask (FLASHGEN_FWD_FAMILY=hopper), and with TMA; float64 checks on
#             the TMA runs. Its GPU tests (test_hopper_mask_tma.py) are in the default part.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
HERE=$(dirname "$0")
W=$OUT/work; mkdir -p $W
trees() {  # old_tree = before draw.patch; tree_a = before the split row keys too
  mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
  (cd old_tree && patch -s -p1 -R < ../$HERE/draw.patch) || { echo "draw.patch failed"; exit 1; }
  mkdir -p tree_a && cp -r old_tree/. tree_a/
  (cd tree_a && patch -s -p1 -R < ../$HERE/split_rowkeys.patch) || { echo "rowkeys patch failed"; exit 1; }
}
case "${1:-}" in
drop)
  trees
  mkdir -p $W/portable $W/hopper
  t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W/portable dropout_causal,dropout_full 4,16,4,4096,128 2
  FLASHGEN_FWD_FAMILY=hopper t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W/hopper \
    dropout_causal,dropout_full 4,16,4,4096,128 1
  cd $W && tar czf $OUT/drop.tgz . ;;
drop64)
  trees
  for fam in portable hopper; do
    mkdir -p $W/$fam
    FLASHGEN_FWD_FAMILY=$fam t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W/$fam \
      dropout_causal,dropout_full 4,32,8,4096,64 1
  done
  cd $W && tar czf $OUT/drop64.tgz . ;;
rowkeys)
  trees
  t0=$(date +%s)
  for shape in 32,12,12,512,64 16,16,4,512,128; do
    d=$W/${shape//,/_}; mkdir -p $d
    for rep in 1 2; do
      for tree in a b c; do
        root=$PWD/tree_a; [ $tree = b ] && root=$PWD/old_tree; [ $tree = c ] && root=$PWD
        check=--no-check; [ $tree$rep = c1 ] && check=
        PYTHONPATH=/tmp/site:$root timeout 70 python3 benchmarks/masks.py $check --dirs fwd+bwd \
          --rounds 3 --budget 60 --shape $shape --only dropout_full,dropout_causal \
          --out $d/masks_${tree}_$rep.csv > $d/masks_${tree}_$rep.txt 2>&1
        stamp "$shape $tree $rep rc=$?"
        grep -h "^name=\|^check\|failed" $d/masks_${tree}_$rep.txt | sed 's/ b=[0-9].*dir=/ /' | cut -c1-160
      done
    done
  done
  cd $W && tar czf $OUT/rowkeys.tgz . ;;
masktma)
  for shape in 4,16,4,4096,128 4,32,8,4096,64; do
    for way in portable hopper tma; do
      fam=; tma=; check=--no-check
      [ $way != portable ] && fam=hopper
      [ $way = tma ] && tma=1 && check=
      d=$W/${shape//,/_}_$way.txt
      FLASHGEN_FWD_FAMILY=$fam FLASHGEN_MASK_TMA=$tma timeout 90 python3 benchmarks/masks.py $check \
        --dirs fwd --rounds 3 --budget 80 --shape $shape --only attn_mask_bias_causal,attn_mask_bool_b1nn \
        --out ${d%.txt}.csv > $d 2>&1
      stamp "$shape $way rc=$?"; grep -h "^name=\|^check\|failed" $d | sed 's/ b=[0-9].*dir=/ /' | cut -c1-200
    done
  done
  cd $W && tar czf $OUT/masktma.tgz . ;;
fuzz)
  for way in default hopper tma dropout; do
    fam=; tma=; drop=
    [ $way = hopper ] || [ $way = tma ] && fam=hopper
    [ $way = tma ] && tma=1
    [ $way = dropout ] && drop=dropout
    FLASHGEN_FWD_FAMILY=$fam FLASHGEN_MASK_TMA=$tma timeout 135 python3 $HERE/fuzz.py 20 7 cuda $drop \
      > $W/fuzz_$way.txt 2>&1
    stamp "fuzz $way rc=$?"; grep -h "^done\|^MISMATCH\|^ERROR" $W/fuzz_$way.txt | cut -c1-300
  done
  cd $W && tar czf $OUT/fuzz.tgz . ;;
kvwindow)
  timeout 300 python3 $HERE/kv_window.py --rounds 3 > $OUT/kv_window.txt 2>&1
  stamp "kv_window rc=$?"; cut -c1-200 $OUT/kv_window.txt ;;
alibi)  # (session 38's job as prepared: its own tree-independent commands and output)
  bash benchmarks/raw/h200_s39b1/job.sh alibi ;;
tflops)
  # (session 40: without a --vary the script refuses to run; tail_split 4 is session 37's)
  timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2 --rounds 11 --rep 40 \
    --vary ts4=tail_split:4@128f --check-dtypes bfloat16 --budget 140 --out $OUT/tflops \
    > $OUT/tflops.txt 2>&1
  stamp "tflops rc=$?"; grep '"tflops"' $OUT/tflops.txt | cut -c1-200
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv ;;
*)
  timeout 560 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
  stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20 ;;
esac
