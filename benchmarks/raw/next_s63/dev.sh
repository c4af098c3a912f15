#!/usr/bin/env bash
# Session 63's device calls (carry .whl; FLASHGEN_COMMIT=<sha>). Calls 1-2 ran next_s62/dev.sh
# (`SEED=6004 CASES=1 TIME=120 ... h200 hfdrop`, then `TIME=520 ... hftest`: 9 of the 11 GPU
# tests passed before the limit). Parts here:
#   hfrest: the two GPU tests of benchmarks/hf_fuzz.py's GPU mode call 2 did not reach
#           (T5 with the Hopper family forced, the wrong mask in bfloat16), ~150 s
#   amptest: (new in 977b167..a8d0d5b, never run on a GPU) the GPU runs of the autocast and
#           float32-cast tests: tests/test_op.py, tests/compile/test_patterns.py and
#           tests/kernels/test_varlen.py -k "autocast or upcast or tensor_fill", then the
#           GPU tests of hf_fuzz's autocast mode (Llama under autocast to bfloat16), then
#           next_s63/peaked.py (a peaked softmax's accuracy beside eager's), ~270 s
#   hfamp:  hf_fuzz.py --device cuda --autocast bfloat16 --grad, head dims 64/128, lengths
#           33-120, seeds from ${SEED:-7300} (float32 models under autocast: rotary q/k cast
#           with v), then the same with --families gptj,codegen,gpt_neo --dtype bfloat16
#           (GPT-J's float32 casts of q and k; session 63's kept sites), ~${TIME:-200} s each
#   then any part of next_s62/dev.sh (hfgpu, hfdrop, opfuzz, h200) with its variables.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
hfrest)
  timeout ${TIME:-250} python3 -m pytest -q -p no:cacheprovider -m gpu -rA \
    tests/compile/test_hf_fuzz.py -k "t5_grad-hopper or wrong_mask" > $OUT/hf_gpu_rest.txt 2>&1
  stamp "the other two gpu tests of hf_fuzz rc=$?"; grep -E "^PASSED|^FAILED|passed|failed" \
    $OUT/hf_gpu_rest.txt | cut -c1-300 | head -12 ;;
amptest)
  timeout 300 python3 -m pytest -q -p no:cacheprovider -v -rfE tests/test_op.py \
    tests/compile/test_patterns.py tests/kernels/test_varlen.py \
    -k "autocast or upcast or tensor_fill" > $OUT/amp_tests.txt 2>&1
  stamp "autocast / upcast tests on the gpu rc=$?"; tail -3 $OUT/amp_tests.txt | cut -c1-300
  grep -E "^FAILED|Error" $OUT/amp_tests.txt | head -12 | cut -c1-400
  timeout 200 python3 -m pytest -q -p no:cacheprovider -v -rfE -m gpu tests/compile/test_hf_fuzz.py \
    -k autocast > $OUT/amp_hf_tests.txt 2>&1
  stamp "hf_fuzz autocast gpu tests rc=$?"; tail -3 $OUT/amp_hf_tests.txt | cut -c1-300
  timeout 60 python3 benchmarks/raw/next_s63/peaked.py > $OUT/peaked_gpu.txt 2>&1
  stamp "peaked softmax accuracy rc=$?"; cat $OUT/peaked_gpu.txt | cut -c1-300 ;;
hfamp)
  timeout ${TIME:-200} python3 -u benchmarks/hf_fuzz.py --device cuda --autocast bfloat16 \
    --grad --head-dims 64,128 --lengths 33,77,120 --seed ${SEED:-7300} --cases 40 \
    > $OUT/hfamp.txt 2>&1
  stamp "hf_fuzz cuda autocast bfloat16 rc=$?"; tail -3 $OUT/hfamp.txt | cut -c1-300
  grep -A12 "^BAD" $OUT/hfamp.txt | cut -c1-300 | head -30
  timeout ${TIME:-200} python3 -u benchmarks/hf_fuzz.py --device cuda --dtype bfloat16 --grad \
    --families gptj,codegen,gpt_neo --head-dims 64,128 --lengths 33,77,120 \
    --seed ${SEED:-7300} --cases 40 > $OUT/hfupcast.txt 2>&1
  stamp "hf_fuzz cuda bfloat16 gptj/codegen/gpt_neo rc=$?"; tail -3 $OUT/hfupcast.txt | cut -c1-300
  grep -A12 "^BAD" $OUT/hfupcast.txt | cut -c1-300 | head -30 ;;
*)
  bash benchmarks/raw/next_s62/dev.sh "$part" ;;
esac
done
