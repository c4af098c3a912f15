#!/usr/bin/env bash
# Session 33 B5 (issues 15, 16), about 420 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b5/job.sh
# 1. Softcapping without the running max (FIXED_MAX, cap 50): is late_wait (off for softcap
#    since session 30, when it slowed the running-max softmax) or ping-pong faster now?
#    fwd_variants.py on the probe grid, float64 checks first.
# 2. The op against every SDPA backend with rounds in alternating order (the harness now reverses
#    every other round): do the rows that run cuDNN on both sides still read below 1.0x?
# Results in $OUT/b5.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 190 python3 benchmarks/fwd_variants.py --softcap 50 --only-softcap --grid probe --rounds 5 \
  --rep 25 --vary L=late_wait:1 --vary pp=pingpong:1 --budget 150 --out $W/fv > $W/fv.txt 2>&1
stamp "fwd_variants rc=$?"; grep -vi warn $W/fv.txt | tail -14 | cut -c1-240
timeout 210 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 6 \
  --rep 20 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|op vs" | tail -20 | cut -c1-260
cd $W && tar czf $OUT/b5.tgz .
