#!/usr/bin/env bash
# Session 34 B6 (issues 16, all), about 500 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b6/job.sh
# 1. With B5's lighter ALiBi softmax: do late_wait (off for ALiBi since session 30 B7) or the
#    other ping-pong setting now pay? fwd_variants.py --alibi on the probe grid's head-dim-128
#    rows, float64 checks first.
# 2. The whole GPU suite on the final tree.
# Results in $OUT/b6.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 benchmarks/fwd_variants.py --alibi --grid probe --shapes 0,2 --rounds 5 --rep 25 \
  --vary L=late_wait:1 --vary pp0=pingpong:0@128f --vary pp1=pingpong:1@128c --budget 130 \
  --out $W/fv > $W/fv.txt 2>&1
stamp "fwd_variants rc=$?"; grep -vi warn $W/fv.txt | tail -8 | cut -c1-260
timeout 320 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -2 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
cd $W && tar czf $OUT/b6.tgz .
