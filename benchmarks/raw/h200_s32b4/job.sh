#!/usr/bin/env bash
# Session 32 B4 (issue 15), about 200 s, carrying .whl: the backend leaving a static-shape SDPA
# call to PyTorch where the op would run PyTorch's own pick (flashgen/compile/patterns/choice.py).
# 1. The GPU tests of the choice, the backend and the launch path (CUDA graphs through the op).
# 2. The Llama block against Inductor (B3's command): its SDPA is_causal call is now expected to
#    be left to PyTorch (kept=1), both sides compiling the same graph.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b4/job.sh; results in $OUT/b4.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/runtime tests/compile \
  tests/kernels/test_launch_gpu.py > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -2 $W/gpu_tests.txt; grep -E "^FAILED|^ERROR" $W/gpu_tests.txt | head -20
timeout 70 python3 benchmarks/llama_block.py --rounds 21 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama rc=$?"; grep -v Warn $W/llama_block.txt | grep -E "ratio|check|left to|replace" | cut -c1-400
cd $W && tar czf $OUT/b4.tgz .
