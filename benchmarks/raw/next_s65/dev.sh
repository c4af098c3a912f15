#!/usr/bin/env bash
# Session 65's device calls (carry .whl; FLASHGEN_COMMIT=<sha>). Call 1 ran
# `next_s64/dev.sh enc` (raw/gpu_s65/call1: 11 of the 13 tests failed, encoder_infer.py could not
# find the backend by name). Parts here:
#   probe: enc_probe.py on the GPU and on the CPU (Dynamo's explain, the pass's sites per graph)
#   enc:   the encoder-layer tests, the varlen autocast test, encoder_infer.py (~150-300 s)
#   deb:   hf_fuzz --families deberta_v2 on the GPU in bfloat16 with gradients (~120 s)
#   enctest: the encoder-layer, DeBERTa/XLM and varlen autocast tests on the GPU (~60 s)
#   mid:   encoder_infer.py --every-size at sizes between call 2's (where the causal rewrite
#          starts to gain)
#   then any part of next_s63/dev.sh with its variables (h200 among them).
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name commit $FLASHGEN_COMMIT"
. benchmarks/device_env.sh > /dev/null 2>&1
HERE=$(dirname "$0")
for part in "$@"; do
case "$part" in
probe)
  TRITON_INTERPRET=0 timeout 120 python3 -u $HERE/enc_probe.py cuda > $OUT/enc_probe_cuda.txt 2>&1
  stamp "probe cuda rc=$?"; grep -v Warn $OUT/enc_probe_cuda.txt | cut -c1-300 | head -40
  TRITON_INTERPRET=1 timeout 60 python3 -u $HERE/enc_probe.py cpu > $OUT/enc_probe_cpu.txt 2>&1
  stamp "probe cpu rc=$?"; grep -E "^==|explain|break|seen" $OUT/enc_probe_cpu.txt | cut -c1-300 ;;
enc)
  bash benchmarks/raw/next_s64/dev.sh enc 2>&1 | grep -v "^card" ;;
deb)
  timeout ${TIME:-150} python3 -u benchmarks/hf_fuzz.py --device cuda --dtype bfloat16 --grad \
    --families deberta_v2 --head-dims 64,128 --lengths 33,77,120 --seed ${SEED:-8200} \
    --cases ${CASES:-8} > $OUT/hf_deberta.txt 2>&1
  stamp "hf_fuzz deberta_v2 cuda bfloat16 rc=$?"; tail -2 $OUT/hf_deberta.txt | cut -c1-300
  grep -A12 "^BAD" $OUT/hf_deberta.txt | cut -c1-300 | head -30 ;;
enctest)  # the encoder-layer tests (static where torch 2.11 needs), the varlen autocast test,
  # the DeBERTa/XLM tests, on the GPU
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/compile/test_encoder_layer.py \
    tests/compile/test_patterns_deberta_xlm.py tests/kernels/test_varlen.py \
    -k "encoder or autocast or deberta or xlm or scale or mask or size" > $OUT/enctest.txt 2>&1
  stamp "encoder / deberta / xlm tests on the gpu rc=$?"; tail -2 $OUT/enctest.txt | cut -c1-300
  grep -E "^FAILED|^ERROR" $OUT/enctest.txt | head -12 | cut -c1-300 ;;
mid)  # encoder_infer between call 2's sizes (causal: 2.1 lost, 34 GFLOP won)
  timeout ${TIME:-300} python3 -u benchmarks/encoder_infer.py --rounds 3 \
    --every-size --shapes 16x512x512x8,8x512x1024x16,8x1024x512x8,4x1024x1024x16,2x2048x1024x16,8x2048x512x8 \
    --json $OUT/encoder_mid.json > $OUT/encoder_mid.txt 2>&1
  stamp "encoder_infer mid rc=$?"; cut -c1-330 $OUT/encoder_mid.txt | grep -v Warn | tail -14 ;;
*)
  bash benchmarks/raw/next_s63/dev.sh "$part" ;;
esac
done
