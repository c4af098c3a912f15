#!/usr/bin/env bash
# Session 30 B4 (issues 13, 16): HopperConfig.fma_exp as levels (B3's all-of-one-consumer form
# read 0.81-0.91x with softcap): every other key's exponential by FMAs in the last consumer (F1)
# or in every consumer (F2). The GPU float64 cases, then A/B over the probe grid's softcap rows
# (cap 30) and over the anchor grid without softcap. Run as bash benchmarks/raw/h200_s30b4/job.sh
# carrying .whl; results under $OUT.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/w; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_hopper.py -k "layouts or masks_match or dynamic_grid" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt
timeout 150 python3 benchmarks/fwd_variants.py --out $W/softcap --grid probe --softcap 30 --only-softcap \
  --budget 110 --rounds 5 --rep 30 --check-dtypes bfloat16 --vary F1=fma_exp:1 --vary F2=fma_exp:2 > $W/softcap.txt 2>&1
stamp "softcap variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/softcap.txt | cut -c1-400
timeout 230 python3 benchmarks/fwd_variants.py --out $W/anchors --grid anchors \
  --budget 190 --rounds 3 --rep 30 --check-dtypes bfloat16 --vary F1=fma_exp:1 --vary F2=fma_exp:2 > $W/anchors.txt 2>&1
stamp "anchor variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/anchors.txt | cut -c1-400
