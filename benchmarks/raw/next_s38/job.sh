#!/usr/bin/env bash
# Prepared in session 37, not run: the whole GPU suite on session 37's final tree (its B3 run
# was stopped by the job's 380 s limit at about 81%, no failure up to there; B4 and B6 ran the
# layout's, the kernels', compile and runtime tests: 246 and 261 passed).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s38/job.sh      (carrying .whl; ~400-550 s)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 560 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20
