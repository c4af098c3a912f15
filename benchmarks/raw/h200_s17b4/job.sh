#!/usr/bin/env bash
# Session 17, batch B4: additive key-padding masks through the hull and the Hopper forward
# (HF's finfo.min padding hidden), 128 x 64 tiles for narrow windows: the whole GPU suite, then
# masks.py's additive/boolean padding and window rows new / old / new (old = 55d0faf's
# flashgen/ and templates/ in old_tree/: B3's tree).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s17b4/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
ROWS=attn_mask_add_pad,attn_mask_bool_pad,window_causal_256,window_causal_1024,window_2sided_512
PYTHONPATH=/tmp/site:$PWD timeout 100 python3 benchmarks/masks.py --only $ROWS --budget 90 --out $W/masks_new.csv > $W/masks_new.txt 2>&1
stamp "masks new rc=$?"; grep -E "check|name=|Error|failed" $W/masks_new.txt | cut -c1-330
PYTHONPATH=/tmp/site:$PWD/old_tree:$PWD timeout 70 python3 benchmarks/masks.py --only $ROWS --no-check --budget 60 --out $W/masks_old.csv > $W/masks_old.txt 2>&1
stamp "masks old rc=$?"; grep -E "name=|Error|failed" $W/masks_old.txt | cut -c1-330
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -15 | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
