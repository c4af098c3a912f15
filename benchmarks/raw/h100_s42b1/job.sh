#!/usr/bin/env bash
# Session 42, B1. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h100_s42b1/job.sh <part>,
# carrying .whl. Parts, by value:
#   windows ~250 s: issue 16's sliding-window rows against the geometric bound. masks.py
#        --windows (new): causal windows 256..8192 at 16k keys (B1 H16, d128) and 256..2048 at
#        4k (B4 H16/4, d128), forward and forward+backward, ratio to the unmasked causal kernel
#        beside `tile_frac` (the visible pairs over the 128 x 128 tiles that hold one: the most
#        a kernel with that tiling can reach counted on the visible pairs).
#   hf   ~350 s: session 41's left A/B, benchmarks/hf_padded.py (B4 T2048 width 2048, 16 heads
#        of 128, 2 layers, left padding, bf16 training graphs): Gemma-2 eager with the split
#        (never measured), Llama eager with the tree before session 41 (old_tree/: pattern.patch
#        = git diff 290fb13 -- flashgen/compile/patterns, reversed) and with this tree, in one run.
#   host ~60 s: host_time.py --rounds 5 (issue 15's host bars on this machine).
#   fuzz ~260 s: h200_s40b1/fuzz.py's random op calls against float64, 10 calls a way (default
#        families; with dropout), unbuffered.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
HERE=$(dirname "$0")
case "${1:-windows}" in
windows)
  timeout 170 python3 -u benchmarks/masks.py --no-check --dirs fwd,fwd+bwd --rounds 3 \
    --shape 1,16,16,16384,128 --windows 256,512,1024,2048,4096,8192 \
    --only window_causal_256,window_causal_512,window_causal_1024,window_causal_2048,window_causal_4096,window_causal_8192 \
    --budget 160 --out $OUT/windows16k.csv > $OUT/windows16k.txt 2>&1
  stamp "windows 16k rc=$?"; grep -E "^name=" $OUT/windows16k.txt | cut -c1-330
  timeout 120 python3 -u benchmarks/masks.py --dirs fwd,fwd+bwd --rounds 3 \
    --shape 4,16,4,4096,128 --windows 512,2048 \
    --only window_causal_256,window_causal_512,window_causal_1024,window_causal_2048 \
    --budget 110 --out $OUT/windows4k.csv > $OUT/windows4k.txt 2>&1
  stamp "windows 4k rc=$?"; grep -E "^name=|^check" $OUT/windows4k.txt | cut -c1-330 ;;
hf)
  mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
  (cd old_tree && patch -s -p1 -R < ../$HERE/pattern.patch) || { echo "pattern.patch failed"; exit 1; }
  for run in ${MODELS:-gemma2:new llama:old llama:new}; do
    fam=${run%%:*}; tree=${run##*:}; root=$PWD; [ $tree = old ] && root=$PWD/old_tree
    PYTHONPATH=/tmp/site:$root timeout 115 python3 -u benchmarks/hf_padded.py --family $fam \
      --out $OUT/${fam}_$tree.json > $OUT/${fam}_$tree.txt 2>&1
    stamp "$fam $tree rc=$?"; grep -E "^fwd|^check" $OUT/${fam}_$tree.txt | cut -c1-200
  done ;;
host)
  timeout 100 python3 -u benchmarks/host_time.py --rounds 5 --commit "${FLASHGEN_COMMIT:-?}" \
    --out $OUT/host.json > $OUT/host.txt 2>&1
  stamp "host rc=$?"; tail -25 $OUT/host.txt ;;
fuzz)
  for way in default dropout; do
    drop=; [ $way = dropout ] && drop=dropout
    timeout 125 python3 -u $HERE/../h200_s40b1/fuzz.py 10 7 cuda $drop > $OUT/fuzz_$way.txt 2>&1
    stamp "fuzz $way rc=$?"; grep -c "^ok" $OUT/fuzz_$way.txt; grep -h "^done\|^MISMATCH\|^ERROR\|^refused" $OUT/fuzz_$way.txt | cut -c1-300
  done ;;
esac
