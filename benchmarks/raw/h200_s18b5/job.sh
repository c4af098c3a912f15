#!/usr/bin/env bash
# Session 18 B5: (1) GPU tests of the Hopper forward with lengths (the producer now drops work
# items past an entry's query rows) and of the runtime/op; (2) masks.py's padding rows, forward,
# this tree and old_tree (6019245, before the drop) in alternating processes (issue 16);
# (3) host_time.py on the two launch-bound shapes (issue 15: a launch-bound auto call's
# signature goes to SDPA's own choice at once). Run as FLASHGEN_COMMIT=<sha> bash
# benchmarks/raw/h200_s18b5/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py tests/runtime tests/test_op.py > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -12 | cut -c1-300
ROWS=pad_right_causal,pad_left_causal,pad_right_full,pad_left_full
for r in 1 2; do
  for tree in new old; do
    if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
    PYTHONPATH=$PP timeout 120 python3 benchmarks/masks.py --only $ROWS --dirs fwd --no-check --out $W/masks_${tree}_$r.csv > $W/masks_${tree}_$r.txt 2>&1
    stamp "masks $tree $r rc=$?"; grep -E "name=" $W/masks_${tree}_$r.txt | sed -E 's/ b=4.*dir=fwd//' | cut -c1-200
  done
done
for shape in 1,1,128,128 1,1,128,64; do
  timeout 50 python3 benchmarks/host_time.py --label s18b5 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; grep -E "fwd|bwd" $W/host_${shape//,/x}.txt | head -6
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
