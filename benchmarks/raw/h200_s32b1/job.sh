#!/usr/bin/env bash
# Prepared in session 31 (issue 13), not run: the device refused three starts and the budget ran
# out. About 330 s. Results in $OUT/b.tgz. Run as FLASHGEN_COMMIT=<sha> bash
# benchmarks/raw/next_s32/job.sh carrying .whl.
# 1. The split and stream-K GPU tests (stream-K's float64 cases have never run) with the layout
#    and dynamic-grid cases.
# 2. The non-causal head-dim-128 rows against stream-K (K: the record with stream_k and without
#    tail_split; every program an equal run of all items' key tiles) and against the record
#    without its tail split (s1); B1 H16 16k is issue 13's 650 TFLOP/s row, whose last round
#    of 68 items tail_split did not help (session 31 B3-B4); the 4k and 1k rows and head dim
#    64's 1k / 4k rows with stream-K as well (K64).
# 3. (a second call, about 330 s: bash benchmarks/raw/next_s32/job.sh grid) The forward and
#    forward+backward grid against cuDNN with FA2, as session 29 B5 read it, on the tree with
#    the 16k record's tail_split (issue 13's geomean and worst shape, issue 15's margins).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = grid ]; then
  FLASHGEN_IMPL=flashgen timeout 330 python3 benchmarks/bwd_grid.py --out $W --budget 300 --modes fast --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
  stamp "grid rc=$?"; python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1
  tail -30 $W/bwd_grid_table.md; cd $W && tar czf $OUT/grid.tgz . && exit 0
fi
timeout 100 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/kernels/test_hopper.py \
  -k "split or stream or layouts or dynamic" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -2 $W/gpu_tests.txt; grep -E "^FAILED|Error" $W/gpu_tests.txt | head
timeout 230 python3 benchmarks/fwd_variants.py --out $W --budget 200 --rounds 9 --rep 30 --shapes 2,8,1,7,0,6,3,4 \
  --check-dtypes bfloat16 --vary K=stream_k:1,tail_split:1,dynamic:0@128f \
  --vary s1=tail_split:1@128f --vary K64=stream_k:1,dynamic:0@64f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused|FAILED|budget' $W/fwd_variants.txt | cut -c1-400
cd $W && tar czf $OUT/b.tgz . && ls
