#!/usr/bin/env bash
# Session 36 B3 (issue 15): the grid rows that read below cuDNN beyond the A/A spread in
# session 35 B2 (B16 H16 1k d128 non-causal forward+backward, B4 H32 4k d64 causal forward,
# B16 H32/8 1k d128 causal) and the worst row by medians (B4 H16 4k d128 non-causal), timed with
# many more rounds than the grid's six, cuDNN timed twice a round (the A/A control).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b3/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 400 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn --control --rounds 21 --rep 20 \
  --shapes '16,16,16,1024,128,0;4,32,32,4096,64,1;16,32,8,1024,128,1;4,16,16,4096,128,0' \
  --out $W/vendor_rows.json > $W/vendor_rows.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_rows.txt | tail -12 | cut -c1-400
cd $W && tar czf $OUT/rows.tgz .
