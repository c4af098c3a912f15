#!/usr/bin/env bash
# Session 42, B2. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h100_s42b2/job.sh, carrying
# .whl (~300 s): ALiBi in the decode kernels (new this session), first on a GPU.
#   1. the GPU tests of the decode and ALiBi kernels (bf16 against float64), ~60 s;
#   2. benchmarks/alibi_decode.py: hand-written ALiBi attention over a KV cache (a decode step
#      and a 4-row draft, caches of 1k and 16k keys, batch 1 and 8, 32 heads of 128, bf16)
#      compiled with flashgen's backend (which now replaces it: bottom-right causal + ALiBi on
#      the decode kernels) against Inductor, inference, checked against float32.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 150 python3 -u -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_decode_alibi.py \
  tests/kernels/test_alibi.py tests/kernels/test_decode.py tests/kernels/test_decode_masks.py \
  > $OUT/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -5 $OUT/gpu_tests.txt
timeout 400 python3 -u benchmarks/alibi_decode.py --batches 1,8 --rows 1,4 --caches 1024,16384 \
  --out $OUT/alibi_decode.json > $OUT/alibi_decode.txt 2>&1
stamp "alibi_decode rc=$?"; grep -E "^B[0-9]" $OUT/alibi_decode.txt
