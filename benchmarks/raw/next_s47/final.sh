#!/usr/bin/env bash
# Session 47, last device call: the GPU tests of masks (block lists now from tile_lists_kernel,
# launched directly), then masked_sweep2.py's dense and per-key rows again.
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_attn_mask.py tests/kernels/test_padding.py tests/kernels/test_hopper_mask_tma.py \
  tests/kernels/test_mask_ranges.py > $OUT/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -2 $OUT/gpu_tests.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_tests.txt | head
timeout 150 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/sweep3.csv --final > $OUT/sweep3.txt 2>&1
stamp "sweep3 rc=$?"; grep -v -i warn $OUT/sweep3.txt
