#!/usr/bin/env bash
# Prepared in session 29 (issues 13, 16; not run: no device time left), about 400 s. Head dim 128,
# 16k keys, not causal, is at 646 TFLOP/s with late_wait shipped (s29 B1/B3/B5; bar 650).
# Variants of its record (128x128 c2w4 b2 r168 P L) the session did not time with late_wait:
# ping-pong (s28 prepared it at 128 but never ran it), a dynamic grid, the plain grid, 64-key
# tiles with 3 and 4 ring slots; seven alternating rounds, MHA and GQA rows, float64 checks
# first.
# Results straight under $OUT. Ran as FLASHGEN_COMMIT=a471a79 bash benchmarks/raw/next_s30/job.sh (moved here once run)
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 benchmarks/fwd_variants.py --out $W --budget 170 --rounds 7 --rep 30 --shapes 2,8 \
  --check-dtypes bfloat16 --vary pp=pingpong:1@128f --vary D=dynamic:1@128f --vary G=persistent:0@128f \
  --vary n64b3=block_n:64,num_buf:3@128f --vary n64b4=block_n:64,num_buf:4@128f > $W/fwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -E '^\{"shape"|geomean|refused' $W/fwd_variants.txt | cut -c1-400
# Issue 16: HF's padded decoder batch as the compile backend now hands it over (session 29:
# causal flag + key-padding mask instead of the [B, 1, N, N] tensor) against that dense tensor
# (attn_mask_bool_b1nn), both head dims, with the float64 checks.
for SHAPE in 4,16,4,4096,128 4,32,8,4096,64; do
  timeout 100 python3 benchmarks/masks.py --only attn_mask_bool_pad_causal,attn_mask_bool_b1nn --shape $SHAPE --budget 80 --out $W/masks_$SHAPE.csv > $W/masks_$SHAPE.txt 2>&1
  stamp "masks $SHAPE rc=$?"; grep -E "^check|^name=" $W/masks_$SHAPE.txt | cut -c1-330
done
