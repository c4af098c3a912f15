#!/usr/bin/env bash
# Session 31, B5: the Hopper split/layout/dynamic GPU tests (the budget left no room for more) on the tree with tail_split in the 16k head-dim-128 record
# (split where half an item's tiles or more are saved), then that record against itself
# without the split (s1), 16k MHA (not split by the policy: a sanity row) and GQA (split).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/fwd_variants.py --out $W --budget 70 --rounds 9 --rep 30 --shapes 2,8 \
  --check-dtypes bfloat16 --vary s1=tail_split:1@128f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAILED|budget' $W/fwd_variants.txt | cut -c1-400
timeout 80 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/kernels/test_hopper.py -k "split or layouts or dynamic" > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -2 $W/gpu_suite.txt; grep -E "^FAILED" $W/gpu_suite.txt | head
cd $W && tar czf $OUT/b5.tgz . && ls
