#!/usr/bin/env bash
# Session 13, batch B5 (issue 16): boolean mask tensors walk block-sparse lists of whole and
# partial key tiles (flashgen/kernels/block_mask.py, BLOCK_SPARSE); their GPU tests, then every
# masks.py row with its float64 checks (this session's closing figures for issue 16).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | cut -c1-250 | tail -8
timeout 260 python3 benchmarks/masks.py --budget 240 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|FAIL" $W/masks.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
