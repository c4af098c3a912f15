#!/usr/bin/env bash
# Session 35 B8, about 350 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s35b8/job.sh
# The whole GPU suite on the session's final kernel tree (new since session 34's B6 suite: head
# dim 128's 4k non-causal record without ping-pong). Results in $OUT/suite.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 470 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
cd $W && tar czf $OUT/suite.tgz .
