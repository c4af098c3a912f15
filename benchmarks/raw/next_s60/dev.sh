#!/usr/bin/env bash
# Session 60's plan for its device time (carry .whl; FLASHGEN_COMMIT=<sha>). Session 60 got one
# H100 late and ran `new` and `opfuzz` (benchmarks/raw/h100_s60/); left for the next session:
# `first` on an H200, then `edge`, `edge2`, `dropop`; `opfuzz` again for more GPU cases. Parts:
#   first: next_s59/dev.sh first (on an H200: issue 15's host bars, issue 13's 650 TFLOP/s row;
#          GPU tests of routes/masks/launches; T5), ~500 s
#   new:   the GPU tests of the bottom-right alignment (dropout beside it is new in session 60)
#          and of the size rules (session 59's dropout rule: never run), then next_s55's `host`
#          (HF ModernBERT's host with the flat call: never timed on a slow host), ~250 s
#   opfuzz: benchmarks/op_fuzz.py on the GPU (never run there): bfloat16 (the Hopper family's
#          paths) then float32, ~250 s
#   edge, edge2, dropop: next_s59/dev.sh's parts
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
first|edge|edge2|dropop)
  bash benchmarks/raw/next_s59/dev.sh "$part" 2>&1 | grep -v "^card\|load average" ;;
new)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_aligned.py \
    tests/compile/test_masked_keep.py > $OUT/new_gpu_tests.txt 2>&1
  stamp "gpu tests (aligned, size rules) rc=$?"; tail -2 $OUT/new_gpu_tests.txt | cut -c1-300
  grep FAILED $OUT/new_gpu_tests.txt | head
  bash benchmarks/raw/next_s55/dev.sh host 2>&1 | grep -v "^card\|load average" ;;
opfuzz)
  for dt in bfloat16 float32; do
    timeout 150 python3 -u benchmarks/op_fuzz.py --device cuda --dtype $dt --cases 400 \
      --seed 0 --no-compile > $OUT/opfuzz_$dt.txt 2>&1
    stamp "op_fuzz $dt rc=$?"; tail -1 $OUT/opfuzz_$dt.txt | cut -c1-300
    grep -A40 FAILED $OUT/opfuzz_$dt.txt | grep -E "Error|FAILED" | cut -c1-400 | head -12
  done ;;
esac
done
