#!/usr/bin/env bash
# Session 61's device calls after its changes (carry .whl; FLASHGEN_COMMIT=<sha>). Parts:
#   check: the GPU tests of the size rules (the SDPA dropout threshold now 19 GFLOP) and of the
#          hopper backward's score modifications (dropout among them), then drop_kinds.py again
#          (call 5 ran it on 21518f1, whose auto took the hopper kind for dropout at head dim 64
#          from 512 keys; reverted in 3a54940, so auto is the split kind there again), ~200 s
#   opfuzz: benchmarks/op_fuzz.py on the GPU, bfloat16, seeds from 1000, 150 s
#   first, edge, edge2, dropop: next_s60/dev.sh's parts (first on an H200)
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
first|edge|edge2|dropop)
  bash benchmarks/raw/next_s60/dev.sh "$part" 2>&1 | grep -v "^card\|load average" ;;
check)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/compile/test_masked_keep.py \
    tests/kernels/test_hopper_bwd.py -k "dropout or score or softcap" > $OUT/check_gpu_tests.txt 2>&1
  stamp "gpu tests (size rules, hopper score mods) rc=$?"; tail -2 $OUT/check_gpu_tests.txt | cut -c1-300
  grep FAILED $OUT/check_gpu_tests.txt | head
  timeout 150 python3 -u benchmarks/raw/h100_s61/drop_kinds.py $OUT/drop_kinds2.json \
    > $OUT/drop_kinds2.txt 2>&1
  stamp "drop_kinds rc=$?"; grep "^causal" $OUT/drop_kinds2.txt ;;
opfuzz)
  timeout 150 python3 -u benchmarks/op_fuzz.py --device cuda --dtype bfloat16 --cases 400 \
    --seed 1000 --no-compile > $OUT/opfuzz_s61.txt 2>&1
  stamp "op_fuzz bfloat16 rc=$?"; tail -1 $OUT/opfuzz_s61.txt | cut -c1-300
  grep -A40 FAILED $OUT/opfuzz_s61.txt | grep -E "Error|FAILED" | cut -c1-400 | head -12 ;;
esac
done
