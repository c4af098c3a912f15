#!/usr/bin/env bash
# Session 28 B3 (issues 13, 16; run as one command line, kept here split), about 130 s: the
# forward at head dim 128 16k non-causal on the new persistent record against the dynamic grid
# and the plain (non-persistent) grid it replaced, seven alternating rounds; every mask row at
# head dim 64.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/fwd_variants.py --out $W --budget 80 --rounds 7 --shapes 2,8 --vary PD=dynamic:1@128f --vary S=persistent:0@128f > $W/fwd_variants.txt 2>&1
stamp "fwd variants rc=$?"
timeout 150 python3 benchmarks/masks.py --budget 135 --no-check --dirs fwd,fwd+bwd --shape 4,32,8,4096,64 --out $W/masks_d64.csv > $W/masks_d64.txt 2>&1
stamp "masks rc=$?"
