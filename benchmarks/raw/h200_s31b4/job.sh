#!/usr/bin/env bash
# Session 31, B4 (issue 13): tail_split with chunks of at least 16 tiles (MIN_CHUNK_TILES).
# The split GPU tests again, then 16k / 4k non-causal rows (head dims 128 and 64) with the
# shipped records against tail_split 3, 5, 8 (the largest chunk count tried; the policy picks
# the fewest tiles up to it), nine alternating rounds. Raw under $OUT/work.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 6 tests/kernels/test_hopper.py \
  -k "split" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -2 $W/gpu_tests.txt; grep -E "^FAILED|Error" $W/gpu_tests.txt | head
timeout 330 python3 benchmarks/fwd_variants.py --out $W --budget 300 --rounds 9 --rep 30 --shapes 2,8,7,1,4 \
  --check-dtypes bfloat16 --vary s3=tail_split:3@128f --vary s5=tail_split:5@128f \
  --vary s8=tail_split:8@128f --vary s8d64=tail_split:8@64f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAILED|budget' $W/fwd_variants.txt | cut -c1-400
cd $W && tar czf $OUT/b4.tgz . && ls
