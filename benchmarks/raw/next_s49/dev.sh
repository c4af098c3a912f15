#!/usr/bin/env bash
# Session 49's device call (either card; its name is printed first). Carrying .whl.
#   gputest ~90 s: the hopper backward kind's GPU tests with key-padding masks and lengths
#          (3154cf5: dK/dV past a mask's key range stored as zeros, allocated without a fill;
#          the mask cases run under the deterministic mode's NaN fill), then test_attn_mask's
#          GPU tests.
#   models ~150 s: HF BERT 32 x 512 without dropout (kept since c9144eb: expected level with
#          Inductor), then the dense additive masks' forward sweep under MASKED_MIN_FLOPS_ADDITIVE.
#   h200 (an H200 only) ~250 s: issue 15's host time (host_time.py), issue 13's 650 TFLOP/s row.
#   (validate, left by session 49 and never run here: next_s50/dev.sh validate / bwdauto; its
#          -k here would have filtered every test file it named)
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
gputest)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu \
    tests/kernels/test_hopper_bwd.py -k "key_padding or lengths or matches_float64" \
    > $OUT/hopper_bwd_gpu.txt 2>&1
  stamp "hopper_bwd gpu rc=$?"; tail -3 $OUT/hopper_bwd_gpu.txt | cut -c1-300
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_attn_mask.py \
    > $OUT/attn_mask_gpu.txt 2>&1
  stamp "attn_mask gpu rc=$?"; tail -2 $OUT/attn_mask_gpu.txt | cut -c1-300 ;;
models)
  timeout 150 python3 -u benchmarks/hf_padded.py --family bert --attn sdpa --batch 32 --seq 512 \
    --width 768 --heads 12 --pad right --out $OUT/hf_bert32.json > $OUT/hf_bert32.txt 2>&1
  stamp "bert 32 rc=$?"; grep -E "^fwd|^check|replaced" $OUT/hf_bert32.txt | cut -c1-200
  timeout 150 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/additive.csv --additive \
    2>&1 | grep -v -i warn | tail -30 ;;
h200)
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/h100_s42b1/job.sh host
    timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2 --rounds 11 --rep 40 \
      --check-dtypes bfloat16 --budget 140 --out $OUT/tflops > $OUT/tflops.txt 2>&1
    stamp "tflops rc=$?"; grep '"tflops"' $OUT/tflops.txt | cut -c1-200
    nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
  else
    echo "h200: not an H200, skipped"
  fi ;;
esac
done
