#!/usr/bin/env bash
# Prepared in session 31 as its B5 (issue 13), not run: the device refused three starts and the
# budget ran out. About 150 s. The 16k head-dim-128 record with tail_split 8 against itself
# without the split (s1): B1 H16 16k (not split by the policy: a sanity row) and B1 H32/8 16k
# (split, measured 1.016-1.027x in session 31 B3-B4 before the policy settled); then the
# Hopper split/layout/dynamic GPU tests. Run as FLASHGEN_COMMIT=<sha> bash
# benchmarks/raw/next_s32/job.sh carrying .whl; results in $OUT/b5.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/fwd_variants.py --out $W --budget 70 --rounds 9 --rep 30 --shapes 2,8 \
  --check-dtypes bfloat16 --vary s1=tail_split:1@128f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAILED|budget' $W/fwd_variants.txt | cut -c1-400
timeout 80 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/kernels/test_hopper.py -k "split or layouts or dynamic" > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -2 $W/gpu_suite.txt; grep -E "^FAILED" $W/gpu_suite.txt | head
cd $W && tar czf $OUT/b5.tgz . && ls
