#!/usr/bin/env bash
# Session 54's device calls (carry .whl).
#   tests ~150 s: the GPU tests of session 53's changes (routes, masks, launches, the backend's
#                 HF cudagraphs test never run before)
#   split ~150 s: mbert_split.py (ModernBERT's host a forward, the op's body switched)
#   parts ~120 s: mbert_parts.py (the masked op's parts in the model and alone)
#   auto: by card (below)
#   next: session 55's first call (below)
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
tests)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
    tests/kernels/test_attn_mask.py tests/kernels/test_launch_gpu.py tests/compile/test_backend_gpu.py \
    > $OUT/gpu_tests.txt 2>&1
  stamp "gpu tests rc=$?"; tail -3 $OUT/gpu_tests.txt | cut -c1-300 ;;
split)
  ROUNDS=${ROUNDS:-3} timeout 300 python3 -u benchmarks/raw/next_s54/mbert_split.py $OUT/split.json > $OUT/split.txt 2>&1
  stamp "split rc=$?"; grep -E "^round|kernels a forward|Error" $OUT/split.txt | cut -c1-400 ;;
parts)
  timeout 300 python3 -u benchmarks/raw/next_s54/mbert_parts.py $OUT/parts.json > $OUT/parts.txt 2>&1
  stamp "parts rc=$?"; grep -v -i "warn\|transformers\]" $OUT/parts.txt | cut -c1-200 | tail -90 ;;
next)  # for session 55 (~260 s; on an H200 add next_s49's h200 part, ~250 s): the routes' GPU
        # tests (the flat test's HF-view cases never ran: 6f8a51b fixed the test after call 8),
        # masks and launches; host_sleep.py once (the flat call's host time on this host)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
    tests/kernels/test_attn_mask.py tests/kernels/test_launch_gpu.py > $OUT/gpu_next.txt 2>&1
  stamp "gpu tests rc=$?"; tail -2 $OUT/gpu_next.txt | cut -c1-300; grep FAILED $OUT/gpu_next.txt | head
  SHAPES=1 ROUNDS=2 timeout 100 python3 -u benchmarks/raw/next_s52/host_sleep.py $OUT/hs_next.json 2>&1 | grep -v -i "warn\|transformers\]" | grep -E "prim|sdpa|composite|round"
  stamp "host_sleep"
  bash $0 parts | grep -v "^card\|load average"  # (~60 s: the parts with the flat call, which routes take it)
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average"
  fi ;;
auto)  # on an H200: next_s49's h200 part (issue 15's host bars, issue 13's TFLOP/s, ~250 s),
        # then split; elsewhere split then tests
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average"
    bash $0 split | grep -v "^card\|load average"
  else
    bash $0 split tests | grep -v "^card\|load average"
  fi ;;
esac
done
