#!/usr/bin/env bash
# Session 63's device calls (carry .whl; FLASHGEN_COMMIT=<sha>). Calls 1-2 ran next_s62/dev.sh
# (`SEED=6004 CASES=1 TIME=120 ... h200 hfdrop`, then `TIME=520 ... hftest`: 9 of the 11 GPU
# tests passed before the limit). Parts here:
#   hfrest: the two GPU tests of benchmarks/hf_fuzz.py's GPU mode call 2 did not reach
#           (T5 with the Hopper family forced, the wrong mask in bfloat16), ~150 s
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
*)
  bash benchmarks/raw/next_s62/dev.sh "$part" ;;
esac
done
