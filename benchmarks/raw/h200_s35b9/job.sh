#!/usr/bin/env bash
# Session 35 B9 (issues 13, 16), about 200 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s35b9/job.sh
# 1. Issue 13's 650 TFLOP/s bar at B1 H16 16k d128 (and B1 H32/8) with the shipped 16k record,
#    beside two variants of it: tail_split 4 and 16 (the record's 8 was picked in session 28).
# 2. ALiBi and softcap 50 forwards against the unmasked kernel after B1's record change (4k
#    non-causal now without ping-pong), masks.py at head dim 128, B4 H16/4 4k.
# Results in $OUT/b9.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 110 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2,8 --rounds 5 --rep 40 \
  --vary ts4=tail_split:4@128f --vary ts16=tail_split:16@128f --check-dtypes bfloat16 \
  --budget 100 --out $W/tail > $W/tail.txt 2>&1
stamp "tail rc=$?"; grep -vi warn $W/tail.txt | tail -3 | cut -c1-300
timeout 80 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 70 \
  --shape 4,16,4,4096,128 --only alibi_full,alibi_causal,softcap_full,softcap_causal \
  --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -h "^name=" $W/masks.txt | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//'
cd $W && tar czf $OUT/b9.tgz .
