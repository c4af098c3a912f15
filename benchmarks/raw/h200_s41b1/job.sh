#!/usr/bin/env bash
# Session 41, B1. Run as bash benchmarks/raw/h200_s41b1/job.sh [part], carrying .whl.
#   hf (default) ~400 s: benchmarks/hf_padded.py (B4 T2048 width 2048, 16 heads of 128, 2
#        layers, left padding, bf16, training graphs) for this session's pattern change
#        (pattern.patch: HF's eager additive `where(causal & keep, 0, finfo.min)` as the causal
#        flag + per-key padding instead of the N x N tensor; BLOOM's mask-dependent ALiBi read
#        as a per-key bias beside them): BLOOM (unreplaced before), Llama eager with this tree
#        and with the tree before it (old_tree/, the patch reversed), Gemma-2 eager with this
#        tree (its old-tree run dropped when the device budget shrank).
#   fuzz ~260 s: ../h200_s40b1/fuzz.py's random op calls against float64 on the GPU, default families and
#        with dropout, 10 calls a way, unbuffered (session 40's runs printed nothing before
#        their time limit: Python's buffered stdout died with them; the script now prints a
#        line for every passing call too).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
HERE=$(dirname "$0")
case "${1:-hf}" in
hf)
  mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
  (cd old_tree && patch -s -p1 -R < ../$HERE/pattern.patch) || { echo "pattern.patch failed"; exit 1; }
  for run in ${MODELS:-bloom:new llama:new llama:old gemma2:new}; do
    fam=${run%%:*}; tree=${run##*:}; root=$PWD; [ $tree = old ] && root=$PWD/old_tree
    PYTHONPATH=/tmp/site:$root timeout 115 python3 -u benchmarks/hf_padded.py --family $fam \
      --out $OUT/${fam}_$tree.json > $OUT/${fam}_$tree.txt 2>&1
    stamp "$fam $tree rc=$?"; grep -E "^fwd|^check" $OUT/${fam}_$tree.txt | cut -c1-200
  done ;;
fuzz)
  for way in default dropout; do
    drop=; [ $way = dropout ] && drop=dropout
    timeout 125 python3 -u $HERE/../h200_s40b1/fuzz.py 10 7 cuda $drop > $OUT/fuzz_$way.txt 2>&1
    stamp "fuzz $way rc=$?"; grep -c "^ok" $OUT/fuzz_$way.txt; grep -h "^done\|^MISMATCH\|^ERROR\|^refused" $OUT/fuzz_$way.txt | cut -c1-300
  done ;;
esac
