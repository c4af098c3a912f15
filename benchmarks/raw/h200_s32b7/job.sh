#!/usr/bin/env bash
# Session 32 B7 (issue 13), about 40 s, carrying .whl: clocks.py beside this file (the SM clock
# and power while do_bench times the shipped hd128 16k forward and cuDNN's).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b7/job.sh; results in $OUT/b7.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/raw/h200_s32b7/clocks.py $W > $W/clocks.txt 2>&1
stamp "clocks rc=$?"; grep -v Warn $W/clocks.txt | tail -14 | cut -c1-250
cd $W && tar czf $OUT/b7.tgz .
