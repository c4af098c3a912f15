#!/usr/bin/env bash
# Session 34 B3 (issue 16), about 450 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b3/job.sh
# 1. Softcapped forward configs. The records were measured on specs without extras; a
#    softcapped score takes a tanh and (FIXED_MAX, cap 50) an exp2 of its own, so its softmax
#    is longer: do more consumers (three of 64 rows, 64-key tiles), 64-key tiles, one 8-warp
#    consumer, or two programs an SM (one 64-row consumer, 128 registers) overlap it better?
#    fwd_variants.py on the probe grid, float64 checks first.
# 2. The issue-16 table on this tree (head dim 128; session 31 B2 was the last full one).
# Results in $OUT/b3.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 260 python3 benchmarks/fwd_variants.py --softcap 50 --only-softcap --grid probe --rounds 5 \
  --rep 25 --vary c3=block_m:192,consumers:3,block_n:64,maxnreg:128,pingpong:0,num_buf:3@64 \
  --vary bn64=block_n:64,num_buf:3 --vary w8=consumers:1,num_warps:8,pingpong:0 \
  --vary two=block_m:64,consumers:1,maxnreg:128,pingpong:0 --budget 220 --out $W/fv > $W/fv.txt 2>&1
stamp "fwd_variants rc=$?"; grep -vi warn $W/fv.txt | tail -16 | cut -c1-240
timeout 250 python3 benchmarks/masks.py --no-check --dirs fwd,fwd+bwd --rounds 3 --budget 230 \
  --shape 4,16,4,4096,128 --out $W/masks_d128.csv > $W/masks_d128.txt 2>&1
stamp "masks rc=$?"; grep -v Warn $W/masks_d128.txt | tail -30 | cut -c1-200
cd $W && tar czf $OUT/b3.tgz .
