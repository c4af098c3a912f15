#!/usr/bin/env bash
# Session 30 B6 (issue 16; cut to what 272 s of budget could hold): the forward of mask kinds not
# re-measured since session 28 (windows,
# softcap, dropout, ALiBi) on the current tree (late_wait shipped on head dim 128's 4k/16k records
# since), B4 H16/4 4k d128; the float64 checks are the GPU suite's. Run as bash
# benchmarks/raw/h200_s30b6/job.sh carrying .whl; results under $OUT.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 100 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 70 \
  --only softcap_full,softcap_causal,alibi_full,alibi_causal,window_causal_1024,dropout_full \
  --shape 4,16,4,4096,128 --out $OUT/masks_d128_fwd.csv > $OUT/masks_d128_fwd.txt 2>&1
stamp "masks rc=$?"; grep -E "^name=|budget" $OUT/masks_d128_fwd.txt | cut -c1-330
