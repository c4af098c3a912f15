#!/usr/bin/env bash
# Session 64's device calls (carry .whl; FLASHGEN_COMMIT=<sha>). Calls 1-2 ran
# next_s63/dev.sh (`amptest`, then `TIME=260 hfamp`). Parts here:
#   enc:   tests/compile/test_encoder_layer.py and the varlen autocast test on the GPU, then
#          benchmarks/encoder_infer.py (nn.TransformerEncoder inference: eager's fused layers,
#          Inductor, flashgen), ~300 s
#   then any part of next_s63/dev.sh with its variables.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name commit $FLASHGEN_COMMIT"
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
enc)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -v -rfE tests/compile/test_encoder_layer.py \
    tests/kernels/test_varlen.py -k "encoder or autocast" > $OUT/enc_tests.txt 2>&1
  stamp "encoder-layer and varlen autocast tests on the gpu rc=$?"; tail -3 $OUT/enc_tests.txt | cut -c1-300
  grep -E "^FAILED|Error" $OUT/enc_tests.txt | head -12 | cut -c1-400
  timeout ${TIME:-300} python3 -u benchmarks/encoder_infer.py --rounds 3 --json $OUT/encoder_infer.json \
    > $OUT/encoder_infer.txt 2>&1
  stamp "encoder_infer rc=$?"; cut -c1-400 $OUT/encoder_infer.txt | grep -v Warn | tail -12 ;;
*)
  bash benchmarks/raw/next_s63/dev.sh "$part" ;;
esac
done
