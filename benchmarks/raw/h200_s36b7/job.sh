#!/usr/bin/env bash
# Session 36 B7: the whole GPU suite on the session's tree (the forward host margin in).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b7/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 540 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20
