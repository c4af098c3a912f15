#!/usr/bin/env bash
# Session 37 B8: the GPU tests of the kernels B4 and B6 did not run, on the final kernel tree
# (the portable forward's three output-stride arguments are in every rendering: dropout, ALiBi,
# softcap, backward and decode-mask tests here).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s37b8/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 185 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_dropout.py tests/kernels/test_alibi.py tests/kernels/test_softcap.py \
  tests/kernels/test_bias_grad.py tests/kernels/test_decode_masks.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_backward.py tests/kernels/test_backward_onepass.py tests/kernels/test_bwd_overlap.py \
  > $OUT/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $OUT/tests.txt; grep -E "^FAILED|^ERROR" $OUT/tests.txt | head
