#!/usr/bin/env bash
# Session 21 B5 (issue 16), about 300 s: the Hopper backward's mask, window and length GPU
# tests (the boolean key-padding mask now applied as an additive vector), then the rows B4
# measured on the new defaults (hopper_bwd.AUTO_EXTRAS / AUTO_WINDOW filled from B2 and B4)
# against the split kind, both in this job: every window, length and key-padding row at
# B4 Hq16/Hkv4 N4096 D128 with the float64 checks, and the key-padding rows at head dim 64.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s21b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
  -k "key_padding or windows or lengths_match" > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-600
ROWS=window_causal_1024,window_causal_256,window_2sided_512,pad_right_full,pad_right_causal,pad_left_full,pad_left_causal,attn_mask_bool_pad,attn_mask_add_pad
run() {  # tag kind shape rows extra
  FLASHGEN_BWD_KIND=$2 timeout 120 python3 benchmarks/masks.py --budget 100 $5 \
    --shape $3 --only $4 --out $W/masks_$1.csv > $W/masks_$1.txt 2>&1
  stamp "masks $1 rc=$?"; grep -E "check|name=|Error|failed" $W/masks_$1.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-260
}
run d128_auto "" 4,16,4,4096,128 $ROWS ""
run d128_split split 4,16,4,4096,128 $ROWS "--no-check --dirs fwd+bwd"
run d64_auto "" 4,32,8,4096,64 attn_mask_bool_pad,attn_mask_add_pad,pad_right_full "--no-check --dirs fwd+bwd"
run d64_split split 4,32,8,4096,64 attn_mask_bool_pad,attn_mask_add_pad,pad_right_full "--no-check --dirs fwd+bwd"
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
