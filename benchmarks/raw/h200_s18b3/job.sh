#!/usr/bin/env bash
# Prepared in session 17 for the next session (about 240 s): every masks.py row on the final
# tree (issue 16's bars; session 17 B3 read them before the narrow-window tiles and the
# additive key-padding changes), the masked and unmasked kernel alternating, 3 readings each.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 330 python3 benchmarks/masks.py --budget 310 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|failed" $W/masks.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
