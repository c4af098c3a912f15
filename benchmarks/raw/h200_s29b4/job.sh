#!/usr/bin/env bash
# Session 29 B4, about 300 s (prepared as B9). (1) Issue 15's third bar (hand-written attention models keep their
# gains; last measured in run 6): examples/backend_speed.py, GPT with a tril buffer and Llama
# with repeat_interleave + hand-written attention, flashgen against Inductor, forward and
# forward+backward, with its correctness check. (2) Issue 16's padding rows with masks.py's new
# `ratio_vs_unpadded` (the unmasked kernel on the same sequences without their padding) beside
# `ratio_vs_plain`, head dims 128 and 64.
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s29b4/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 examples/backend_speed.py --styles gpt,llama_repeat --seqs 2048,4096 --json $W/backend_speed.json > $W/backend_speed.txt 2>&1
stamp "backend_speed rc=$?"; grep -v Warn $W/backend_speed.txt | tail -6 | cut -c1-330
PADS=pad_right_full,pad_right_causal,pad_left_full,pad_left_causal
timeout 80 python3 benchmarks/masks.py --no-check --only $PADS --shape 4,16,4,4096,128 --budget 70 --out $W/masks_d128.csv > $W/masks_d128.txt 2>&1
stamp "masks d128 rc=$?"; grep "^name=" $W/masks_d128.txt | cut -c1-400
timeout 80 python3 benchmarks/masks.py --no-check --only $PADS --shape 4,32,8,4096,64 --budget 70 --out $W/masks_d64.csv > $W/masks_d64.txt 2>&1
stamp "masks d64 rc=$?"; grep "^name=" $W/masks_d64.txt | cut -c1-400
