#!/usr/bin/env bash
# Session 66's device plan (carry .whl; FLASHGEN_COMMIT=<sha>). No machine came in session 66
# (three tries got none; then loans were paused), so session 65's parts are still to run. Parts:
#   swin:  benchmarks/swin_train.py (HF Swin v2-T in bfloat16, forward and training step,
#          Inductor vs flashgen: session 66's Swin v2 coverage against "never slower"), with
#          the size rule and then --every-size (the rewrite itself), ~${TIME:-250} s each
#   then any part of next_s65/dev.sh (enctest, mid, and next_s63's h200) with its variables.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
swin)
  for extra in "" "--every-size"; do
    tag=${extra:+_every}
    timeout ${TIME:-250} python3 -u benchmarks/swin_train.py --batch ${BATCH:-32} --rounds 5 \
      $extra --out $OUT/swin$tag.json > $OUT/swin$tag.txt 2>&1
    stamp "swin_train $extra rc=$?"; grep -E "inductor |check|Error" $OUT/swin$tag.txt | cut -c1-260
  done ;;
*)
  bash benchmarks/raw/next_s65/dev.sh "$part" ;;
esac
done
