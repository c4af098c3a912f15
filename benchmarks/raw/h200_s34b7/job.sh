#!/usr/bin/env bash
# Session 34 B7 (issue 16), about 120 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b7/job.sh
# 1. ALiBi now runs without ping-pong (hopper.PINGPONG_OFF, from B6): masks.py's ALiBi rows at
#    head dim 128, forward, against the unmasked kernel in the same process.
# 2. Does softcapping (FIXED_MAX, cap 50) gain without ping-pong too? Session 33 B5 timed
#    ping-pong on for the causal rows only (the non-causal 4k record has it already).
# Results in $OUT/b7.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 60 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 5 --budget 50 \
  --shape 4,16,4,4096,128 --only alibi_causal,alibi_full --out $W/alibi.csv > $W/alibi.txt 2>&1
stamp "masks rc=$?"; grep -h "^name=" $W/alibi.txt | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/'
timeout 100 python3 benchmarks/fwd_variants.py --softcap 50 --only-softcap --grid probe --shapes 0,2 \
  --rounds 5 --rep 25 --vary pp0=pingpong:0@128f --budget 70 --out $W/fv > $W/fv.txt 2>&1
stamp "fwd_variants rc=$?"; grep -vi warn $W/fv.txt | tail -4 | cut -c1-260
cd $W && tar czf $OUT/b7.tgz .
