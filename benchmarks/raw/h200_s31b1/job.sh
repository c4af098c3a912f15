#!/usr/bin/env bash
# Prepared in session 30 (issues 15, 16); ran in session 31 as B1 (A) and B2 (B), moved here
# from benchmarks/raw/next_s31/. Two calls of at most
# ~330 s each: bash benchmarks/raw/next_s31/job.sh A, then B, carrying .whl; results straight
# under $OUT (file names without commas: the device tool refuses them).
# A1. The GPU suite on the tree with softcap and ALiBi off late_wait (hopper.LATE_WAIT_OFF) and
#     the mask ranges (MASK_RANGES, opt-in FLASHGEN_MASK_RANGES=1; its float64 cases force it).
# A2. A boolean [B, 1, N, N] mask (HF's causal-and-padding batch, masks.py attn_mask_bool_b1nn)
#     in the Hopper forward with and without its key ranges, and in the default family.
# B1. Dropout's forward with and without the records' late_wait (session 30 B7 measured softcap,
#     ALiBi, a window and a key mask, not dropout).
# B2. Every masks.py row, forward and forward+backward, head dim 128 (the issue-16 table).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
if [ "$1" = A ]; then
  timeout 290 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/gpu_suite.txt 2>&1
  stamp "gpu suite rc=$?"; tail -3 $OUT/gpu_suite.txt; grep -E "^FAILED" $OUT/gpu_suite.txt | head
  for V in default hopper ranges; do
    case $V in
      default) ENVS="";;
      hopper) ENVS="FLASHGEN_FWD_FAMILY=hopper";;
      ranges) ENVS="FLASHGEN_FWD_FAMILY=hopper FLASHGEN_MASK_RANGES=1";;
    esac
    for SH in 4_16_4_4096_128 4_32_8_4096_64; do
      env $ENVS timeout 40 python3 benchmarks/masks.py --dirs fwd --rounds 3 --budget 30 \
        --only attn_mask_bool_b1nn --shape ${SH//_/,} --out $OUT/b1nn_${V}_$SH.csv > $OUT/b1nn_${V}_$SH.txt 2>&1
      stamp "b1nn $V $SH rc=$?"; grep -E "^check|^name=" $OUT/b1nn_${V}_$SH.txt | cut -c1-260
    done
  done
else
  python3 -c "
import json; d=json.load(open('tuning_db/hopper/nvidia-h200.json'))
for r in d['records']: r['config'].pop('late_wait', None)
json.dump(d, open('/tmp/noL.json','w'))"
  for V in L noL; do
    if [ $V = noL ]; then export FLASHGEN_HOPPER_CONFIGS=/tmp/noL.json; fi
    timeout 40 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 25 \
      --only dropout_full,dropout_causal --shape 4,16,4,4096,128 --out $OUT/dropout_$V.csv > $OUT/dropout_$V.txt 2>&1
    stamp "dropout $V rc=$?"; grep -E "^name=" $OUT/dropout_$V.txt | cut -c1-200
  done
  unset FLASHGEN_HOPPER_CONFIGS
  timeout 220 python3 benchmarks/masks.py --no-check --dirs fwd,fwd+bwd --rounds 3 --budget 200 \
    --shape 4,16,4,4096,128 --out $OUT/masks_d128.csv > $OUT/masks_d128.txt 2>&1
  stamp "masks d128 rc=$?"; grep -E "^name=|budget" $OUT/masks_d128.txt | cut -c1-330
fi
