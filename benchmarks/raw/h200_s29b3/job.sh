#!/usr/bin/env bash
# Session 29 B3 (issue 13), run as one command on 9d079e4, then session 28's prepared B8
# (benchmarks/raw/h200_s28b8/, its output there): late_wait alone on the 4k and 16k rows of the
# anchor grid (B1's budget stopped after the 1k rows), five alternating rounds.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 170 python3 benchmarks/fwd_variants.py --out $OUT/lw --budget 140 --rounds 5 --rep 30 --shapes 1,2,4,5,7,8 \
  --check-dtypes bfloat16 --vary LW=late_wait:1 > $OUT/lw/fwd_variants.txt 2>&1
