#!/usr/bin/env bash
# Session 30 B3 (issues 13, 16): HopperConfig.fma_exp (the last consumer's exponentials by FMAs,
# flashgen/kernels/exp2_fma.py). Part A: its GPU float64 cases (layouts, masks) and an A/B over
# the probe grid's softcap rows (cap 30), where MUFU carries two ops a score; part B: the A/B
# over the anchor grid without softcap. Run as bash benchmarks/raw/h200_s30b3/job.sh A|B
# carrying .whl; results under $OUT.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/w; mkdir -p $W
if [ "$1" = A ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
    tests/kernels/test_hopper.py -k "layouts or masks_match or dynamic_grid" > $W/gpu_tests.txt 2>&1
  stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt
  timeout 250 python3 benchmarks/fwd_variants.py --out $W/softcap --grid probe --softcap 30 --only-softcap \
    --budget 200 --rounds 5 --rep 30 --check-dtypes bfloat16 --vary F=fma_exp:1 > $W/softcap.txt 2>&1
  stamp "softcap variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/softcap.txt | cut -c1-400
else
  timeout 500 python3 benchmarks/fwd_variants.py --out $W/anchors --grid anchors \
    --budget 440 --rounds 3 --rep 30 --check-dtypes bfloat16 --vary F=fma_exp:1 > $W/anchors.txt 2>&1
  stamp "anchor variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAIL' $W/anchors.txt | cut -c1-400
fi
