#!/usr/bin/env bash
# Session 27 B3 (issue 13): variants of the forward configs at head dim 128 without causal
# masking (issue 13's 650 TFLOP/s bar at 16k keys; B1 read the shipped config at 642 launched
# from a plan): ping-pong, three ring slots, persistent and dynamic grids
# (benchmarks/fwd_variants.py, five alternating rounds), on the 16k, 4k and GQA 16k shapes.
# Results straight under $OUT (a run cut short still returns them).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s27b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 250 python3 benchmarks/fwd_variants.py --out $W --budget 200 --rounds 5 --rep 30 \
  --shapes 2,1,8 --check-dtypes bfloat16 \
  --vary pp=pingpong:1@128f --vary b3=num_buf:3@128f --vary P=persistent:1@128f \
  --vary PD=persistent:1,dynamic:1@128f --vary ppP=pingpong:1,persistent:1@128f \
  --vary ppPD=pingpong:1,persistent:1,dynamic:1@128f > $W/fwd_variants.txt 2>&1
stamp "fwd variants rc=$?"; grep -v '^{"shape"' $W/fwd_variants.txt | tail -12 | cut -c1-300
grep '^{"shape"' $W/fwd_variants.txt | cut -c1-400
