#!/usr/bin/env bash
# Session 30 B5 (issues 13, 16): HopperConfig.mma_sum, the softmax's row sums on the tensor cores
# (l = P @ ones, an [rows, 8] wgmma issued after the softmax) instead of an FADD a score. The GPU
# float64 cases, then A/B over the anchor grid and the probe grid's softcap rows (cap 30).
# Run as bash benchmarks/raw/h200_s30b5/job.sh carrying .whl; results under $OUT.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/w; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_hopper.py -k "layouts or masks_match or dynamic_grid or lengths or key_padding or mask_tensors" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt; grep -E "^FAILED" $W/gpu_tests.txt | head
timeout 250 python3 benchmarks/fwd_variants.py --out $W/anchors --grid anchors \
  --budget 210 --rounds 3 --rep 30 --check-dtypes bfloat16 --vary S=mma_sum:1 > $W/anchors.txt 2>&1
stamp "anchor variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/anchors.txt | cut -c1-300
timeout 110 python3 benchmarks/fwd_variants.py --out $W/softcap --grid probe --softcap 30 --only-softcap \
  --budget 80 --rounds 3 --rep 30 --check-dtypes bfloat16 --vary S=mma_sum:1 > $W/softcap.txt 2>&1
stamp "softcap variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/softcap.txt | cut -c1-300
