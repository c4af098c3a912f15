#!/usr/bin/env bash
# Session 36 B4 (issue 15): the whole grid, the op against cuDNN (the fastest SDPA backend on
# every row of session 35 B2's four-backend grid, by 1.5x or more over flash and efficient)
# with cuDNN timed twice a round (A/A control), 21 rounds instead of B2's six.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b4/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 500 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn --control --rounds 21 --rep 20 \
  --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|A/A control" | tail -4
cd $W && tar czf $OUT/grid.tgz .
