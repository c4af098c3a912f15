#!/usr/bin/env bash
# Session 50's device calls (either card; its name is printed first). Carrying .whl. The parts
# gputest, models and h200 (issue 15's host time and issue 13's 650 TFLOP/s row, on an H200
# only) are next_s49/dev.sh's.
#   validate ~400 s (session 49's, which its device time left undone; its -k no longer filters
#          the other test files): the hopper kind's GPU mask tests (two causal GQA cases new),
#          the routing's GPU tests, ModernBERT and Llama (left padding) under the new
#          AUTO_EXTRAS.
#   bwdauto ~560 s: benchmarks/bwd_auto.py on AUTO_WINDOW and AUTO_SCORE_MODS at 1k-4k keys (are
#          they stale like the key-padding masks' were?); BWD_TABLES / BWD_LENGTHS override.
#   short ~300 s: attn_bwd_short's tests on CUDA tensors, short_ab.py, host_time.py both ways.
#   mini ~100 s: the short tests and host_time.py once each way (what session 50's budget left).
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
validate)
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
    -k key_padding_masks_match > $OUT/hopper_mask_gpu.txt 2>&1
  stamp "hopper mask gpu rc=$?"; tail -2 $OUT/hopper_mask_gpu.txt | cut -c1-300
  timeout 160 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py \
    tests/kernels/test_padding.py tests/kernels/test_bwd_kind.py tests/compile > $OUT/validate_gpu.txt 2>&1
  stamp "gpu tests rc=$?"; tail -2 $OUT/validate_gpu.txt | cut -c1-300
  for fam in modernbert llama; do
    a=""; [ $fam = modernbert ] && a="--attn sdpa --batch 4 --seq 2048 --width 1024 --heads 16 --pad right"
    timeout 120 python3 -u benchmarks/hf_padded.py --family $fam $a --out $OUT/$fam.json \
      > $OUT/$fam.txt 2>&1
    stamp "$fam rc=$?"; grep -E "^fwd|^check" $OUT/$fam.txt | cut -c1-220
  done ;;
bwdauto)
  # every table of the hopper kind's defaults against a fresh split/hopper reading
  # (the key-padding masks were re-read in session 49; windows and score mods first, 512 keys
  # left out: the shipped entries are 1024 or 4096, and 512 read 0.88-1.10 for the masks)
  timeout 560 python3 -u benchmarks/bwd_auto.py --budget 500 --out $OUT/bwd_auto.json \
    --tables ${BWD_TABLES:-AUTO_WINDOW,AUTO_SCORE_MODS} --lengths ${BWD_LENGTHS:-1024,2048,4096} \
    2>&1 | grep -v -i warn | tail -60 ;;
short)
  # the one-launch short backward (attn_bwd_short) on the GPU: its tests (CUDA tensors), the
  # GPU time against the split kernels, the host time of a launch-bound forward+backward
  timeout 100 python3 -m pytest -q -p no:cacheprovider -p no:randomly tests/kernels/test_backward.py \
    -k "short" > $OUT/short_tests.txt 2>&1
  stamp "short tests rc=$?"; tail -2 $OUT/short_tests.txt | cut -c1-300
  ROUNDS=3 timeout 150 python3 -u benchmarks/raw/next_s50/short_ab.py $OUT/short_ab.json 2>&1 | grep -v -i warn
  stamp "short_ab rc=$?"
  for s in 1 0; do
    FLASHGEN_BWD_SHORT=$s timeout 60 python3 benchmarks/host_time.py --rounds 5 --label short$s \
      --out $OUT/host_short$s.json > $OUT/host_short$s.txt 2>&1
    stamp "host short=$s rc=$?"; grep -E "^ *(fwd_bwd|bwd|fwd) " $OUT/host_short$s.txt | cut -c1-160
  done ;;
mini)
  # what the last 254 s allowed: the short kernel's tests on CUDA tensors and one host_time each way
  timeout 70 python3 -m pytest -q -p no:cacheprovider -p no:randomly tests/kernels/test_backward.py \
    -k "short_backward_is_one_launch or writes_every" > $OUT/short_tests.txt 2>&1
  stamp "short tests rc=$?"; tail -2 $OUT/short_tests.txt | cut -c1-300
  for s in 1 0; do
    FLASHGEN_BWD_SHORT=$s timeout 45 python3 benchmarks/host_time.py --rounds 3 --label short$s \
      --out $OUT/host_short$s.json > $OUT/host_short$s.txt 2>&1
    stamp "host short=$s rc=$?"; grep -E "^ *(fwd_bwd|bwd|fwd) " $OUT/host_short$s.txt | cut -c1-160
  done ;;
esac
done
