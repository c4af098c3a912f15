#!/usr/bin/env bash
# Session 38 B4 (issue 16: dropout at BERT's lengths), carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b4/job.sh
# Which backward kind should run dropout below 1k keys, now that the hopper kind hashes each row
# key once (B2): hopper_bwd.AUTO_SCORE_MODS takes dropout from 1024 keys (session 22's 1k/4k
# measurements); 512 was never measured. For each shape: the hopper kind's float64 check
# (FLASHGEN_BWD_KIND=hopper), then masks.py's --bwd-kinds hopper,split A/B (five alternating
# readings each, forward+backward, one process).
. benchmarks/device_env.sh > /dev/null 2>&1
for shape in 32,12,12,512,64 16,16,4,512,128; do
  tag=${shape//,/_}
  FLASHGEN_BWD_KIND=hopper timeout 100 python3 benchmarks/masks.py --dirs fwd+bwd --rounds 1 \
    --budget 90 --shape $shape --only dropout_full,dropout_causal > $OUT/check_$tag.txt 2>&1
  stamp "check $shape rc=$?"; grep -h "^check\|failed" $OUT/check_$tag.txt | cut -c1-160
  timeout 140 python3 benchmarks/masks.py --no-check --dirs fwd+bwd --rounds 5 --budget 130 \
    --shape $shape --only dropout_full,dropout_causal --bwd-kinds hopper,split > $OUT/kinds_$tag.txt 2>&1
  stamp "kinds $shape rc=$?"; grep -h "^kinds\|^name=" $OUT/kinds_$tag.txt | cut -c1-240
done
