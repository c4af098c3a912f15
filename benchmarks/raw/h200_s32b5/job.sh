#!/usr/bin/env bash
# Session 32 B5 (issue 15), about 60 s, carrying .whl: profile_op.py beside this file (the
# kernels of a forward+backward step through the op against SDPA-cuDNN's on B3's 0.99x rows).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b5/job.sh; results in $OUT/b5.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 benchmarks/raw/h200_s32b5/profile_op.py $W/profile_op.json > $W/profile_op.txt 2>&1
stamp "profile rc=$?"; grep -v Warn $W/profile_op.txt | tail -40 | cut -c1-200
cd $W && tar czf $OUT/b5.tgz .
