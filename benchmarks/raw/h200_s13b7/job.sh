#!/usr/bin/env bash
# Session 13, batch B7 (issue 16): the block-sparse lists counted in one pass (f86e2d0): the
# mask GPU tests, masks.py's boolean [B, 1, N, N] row with its float64 check, kernel by kernel.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | cut -c1-250 | tail -8
timeout 100 python3 benchmarks/masks.py --only attn_mask_bool_b1nn --budget 90 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|FAIL" $W/masks.txt | cut -c1-330
timeout 60 python3 benchmarks/mask_kernels.py --only attn_mask_bool_b1nn > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"; grep -v Warn $W/mask_kernels.txt | grep -v warn | head -24
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
