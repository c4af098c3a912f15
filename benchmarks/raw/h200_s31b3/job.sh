#!/usr/bin/env bash
# Session 31, B3 (issue 13): the split last round (tail_split). GPU tests of the split kernel
# against float64, then the non-causal grid rows with the shipped records and with tail_split
# 8 / 16 (head dim 128) and 8 (head dim 64), seven alternating rounds. Raw under $OUT/work.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 6 tests/kernels/test_hopper.py \
  -k "split or layouts_and_persistent or dynamic_grid or hopper_forward_matches" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt; grep -E "^FAILED|Error" $W/gpu_tests.txt | head
timeout 330 python3 benchmarks/fwd_variants.py --out $W --budget 300 --rounds 7 --rep 30 --shapes 2,8,1,7,0,6,3 \
  --check-dtypes bfloat16 --vary s8=tail_split:8@128f --vary s16=tail_split:16@128f \
  --vary s8d64=tail_split:8@64f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAILED|budget' $W/fwd_variants.txt | cut -c1-400
cd $W && tar czf $OUT/b3.tgz . && ls
