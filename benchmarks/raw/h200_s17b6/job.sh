#!/usr/bin/env bash
# Session 17, batch B6 (the session's last device time): an additive key-padding mask's split
# backward without the bias inside an all-zero range and its non-causal dQ kernel on SM90_DQ:
# the GPU tests of masks and key padding, then masks.py's additive/boolean padding rows new /
# old (old = 284edf5's flashgen/ and templates/ in old_tree/).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s17b6/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh >/dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py tests/kernels/test_hopper.py -k "mask or padding or hull" > $W/pytest_masks.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED" $W/pytest_masks.txt | tail -6 | cut -c1-300
ROWS=attn_mask_add_pad,attn_mask_bool_pad
PYTHONPATH=/tmp/site:$PWD timeout 45 python3 benchmarks/masks.py --only $ROWS --rounds 2 --budget 40 --out $W/masks_new.csv > $W/masks_new.txt 2>&1
stamp "masks new rc=$?"; grep -E "check|name=|Error|failed" $W/masks_new.txt | cut -c1-330
PYTHONPATH=/tmp/site:$PWD/old_tree:$PWD timeout 35 python3 benchmarks/masks.py --only attn_mask_add_pad --no-check --rounds 2 --budget 30 --out $W/masks_old.csv > $W/masks_old.txt 2>&1
stamp "masks old rc=$?"; grep -E "name=|Error|failed" $W/masks_old.txt | cut -c1-330
stamp end
