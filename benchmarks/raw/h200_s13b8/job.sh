#!/usr/bin/env bash
# Session 13, batch B8 (issue 16): B7's block-sparse GPU test looked for a kept plan (kept only
# once a config settles); it now records the lists' building: the mask GPU tests again.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error|^E" $W/pytest_gpu.txt | cut -c1-250 | tail -12
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
