#!/usr/bin/env bash
# Session 33 B7: B6's one failure (test_backward_consumes_the_masked_hopper_forward took the
# last of MASK_CASES, which B3's two new cases had moved; it now names its case) run again with
# the other Hopper mask tests. About 60 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b7/job.sh
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 4 tests/kernels/test_hopper.py \
  -k "backward_consumes or masks_match or fixed_max" 2>&1 | tail -4
stamp done
