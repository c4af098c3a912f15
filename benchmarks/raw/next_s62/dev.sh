#!/usr/bin/env bash
# Session 62's device calls (carry .whl; FLASHGEN_COMMIT=<sha>). Parts:
#   h200:   on an H200 only, issue 15's host bars and issue 13's 650 TFLOP/s row (next_s49's
#           h200 part), ~300 s; skipped on any other card
#   opfuzz: benchmarks/op_fuzz.py on the GPU, bfloat16 then float32, 300 cases each from seed
#           ${SEED:-3000} (sessions 60-61 ran 0-399 and 1000-1035 there), ~300 s
#   hftest: the GPU tests of benchmarks/hf_fuzz.py's GPU mode (new in session 62), ~200 s
#   hfgpu:  hf_fuzz.py --device cuda --dtype bfloat16 --grad, head dims 64/128, lengths
#           33-120, the Hopper family forced (forward and backward), seeds from ${SEED:-0}
#   hfdrop: hf_fuzz.py --device cuda --dtype bfloat16 --grad --dropout 0.2, the defaults'
#           kernels, seeds from ${SEED:-6000}
# Ran in session 62 (benchmarks/raw/h100_s62/README.md): opfuzz, hftest (twice, cut short),
# hfgpu (seeds 0-5), hfdrop (6000-6004). Left for the next session: `TIME=500 dev.sh hftest`
# alone (cold Triton caches: only 7, then 5 of the GPU tests finished in ~240 s); `SEED=6004
# CASES=1 dev.sh hfdrop` (HF Falcon: session 62's BAD case, most likely its transformers 5.17
# code applying no dropout: now recorded as "none applied" if so); `SEED=6 dev.sh hfgpu`;
# `h200` on an H200.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
h200)
  bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average" ;;
opfuzz)
  for dt in bfloat16 float32; do
    timeout 150 python3 -u benchmarks/op_fuzz.py --device cuda --dtype $dt --cases 300 \
      --seed ${SEED:-3000} --no-compile > $OUT/opfuzz_$dt.txt 2>&1
    stamp "op_fuzz $dt rc=$?"; tail -1 $OUT/opfuzz_$dt.txt | cut -c1-300
    grep -A40 FAILED $OUT/opfuzz_$dt.txt | grep -E "Error|FAILED" | cut -c1-400 | head -12
  done ;;
hftest)
  timeout ${TIME:-280} python3 -m pytest -q -p no:cacheprovider -m gpu tests/compile/test_hf_fuzz.py \
    > $OUT/hf_gpu_tests.txt 2>&1
  stamp "gpu tests of hf_fuzz rc=$?"; tail -2 $OUT/hf_gpu_tests.txt | cut -c1-300
  grep -E "^FAILED|Error" $OUT/hf_gpu_tests.txt | head -12 | cut -c1-400 ;;
hfgpu)
  FLASHGEN_FWD_FAMILY=hopper FLASHGEN_BWD_KIND=hopper timeout ${TIME:-200} python3 -u \
    benchmarks/hf_fuzz.py --device cuda --dtype bfloat16 --grad --head-dims 64,128 \
    --lengths 33,77,120 --seed ${SEED:-0} --cases ${CASES:-40} > $OUT/hfgpu_hopper.txt 2>&1
  stamp "hf_fuzz cuda bfloat16 hopper rc=$?"; tail -3 $OUT/hfgpu_hopper.txt | cut -c1-300
  grep -A12 "^BAD" $OUT/hfgpu_hopper.txt | cut -c1-300 | head -30 ;;
hfdrop)
  timeout ${TIME:-150} python3 -u benchmarks/hf_fuzz.py --device cuda --dtype bfloat16 --grad \
    --dropout 0.2 --seed ${SEED:-6000} --cases ${CASES:-40} > $OUT/hfgpu_drop.txt 2>&1
  stamp "hf_fuzz cuda bfloat16 dropout rc=$?"; tail -3 $OUT/hfgpu_drop.txt | cut -c1-300
  grep -A12 "^BAD" $OUT/hfgpu_drop.txt | cut -c1-300 | head -30 ;;
esac
done
