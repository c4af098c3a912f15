#!/usr/bin/env bash
# Session 15, batch B1 (issue 16): the GPU tests of masks, padding and the Hopper family (the
# key_hull whole-range test has not run on a GPU since it moved), then per-kernel times of the
# key-padding rows (bool mask vs key lengths, right causal) to see where the bool mask's
# backward loses to key_lengths.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 220 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_attn_mask.py tests/kernels/test_hopper.py tests/kernels/test_padding.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -6 $W/pytest_gpu.txt | cut -c1-300
timeout 200 python3 benchmarks/mask_kernels.py --only attn_mask_bool_pad,pad_right_full,pad_right_causal > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"; cat $W/mask_kernels.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
