#!/usr/bin/env bash
# Session 33 B6: the whole GPU suite on the session's final kernels (FIXED_MAX softcapping is now
# what every softcapped Hopper forward with a cap up to 55 runs, the compile backend's Gemma-2
# style models included). About 400 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b6/job.sh
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 420 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
cd $W && tar czf $OUT/suite.tgz .
