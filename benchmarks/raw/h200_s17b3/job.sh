#!/usr/bin/env bash
# Session 17, batch B3: every masks.py row on the current kernels (issue 16's bars; the masked
# and unmasked kernel alternating, 3 readings each), then the window rows' forward with 128 x 64
# tiles (FLASHGEN_HOPPER_CONFIGS = hopper_bn64_buf{3,4}.json here: the hd128 4096 buckets
# replaced; a narrow band walked in 64-key tiles computes fewer keys outside it).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s17b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
J=benchmarks/raw/h200_s17b3
timeout 330 python3 benchmarks/masks.py --budget 310 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|allocator|Error|failed" $W/masks.txt | cut -c1-330
WROWS=window_causal_1024,window_causal_256,window_2sided_512
for nb in 3 4; do
  FLASHGEN_HOPPER_CONFIGS=$J/hopper_bn64_buf$nb.json timeout 80 python3 benchmarks/masks.py --only $WROWS --dirs fwd --no-check --budget 70 --out $W/masks_bn64_buf$nb.csv > $W/masks_bn64_buf$nb.txt 2>&1
  stamp "bn64 buf$nb rc=$?"; grep -E "name=|readings|Error" $W/masks_bn64_buf$nb.txt | cut -c1-330
done
timeout 60 python3 benchmarks/masks.py --only $WROWS --dirs fwd --no-check --budget 50 --out $W/masks_default_again.csv > $W/masks_default_again.txt 2>&1
stamp "default again rc=$?"; grep -E "name=|readings|Error" $W/masks_default_again.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
