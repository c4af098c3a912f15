#!/usr/bin/env bash
# Session 22 B4 (issues 16, 14), about 480 s: every masks.py row on the shipped defaults after
# B1/B2 filled hopper_bwd.AUTO_SCORE_MODS and widened AUTO_WINDOW/AUTO_EXTRAS (float64 checks,
# then forward and forward+backward against the unmasked kernel and SDPA: issue 16's bars),
# at head dim 128 (4k keys, GQA 4) and the score-mod rows at head dim 64; then session 20's
# head dim 64 A/B of the hopper kind against the split kind (hopper_bwd.AUTO at 64).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s22/job_d.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 290 python3 benchmarks/masks.py --budget 275 --shape 4,16,4,4096,128 \
  --out $W/masks_d128.csv > $W/masks_d128.txt 2>&1
stamp "masks d128 rc=$?"; grep -E "check|name=|Error|failed" $W/masks_d128.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-260
timeout 80 python3 benchmarks/masks.py --budget 70 --no-check --shape 4,32,8,4096,64 \
  --only softcap_causal,alibi_full,dropout_causal,dropout_full --out $W/masks_d64.csv > $W/masks_d64.txt 2>&1
stamp "masks d64 rc=$?"; grep -E "name=|Error|failed" $W/masks_d64.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-260
timeout 100 python3 benchmarks/hopper_bwd.py --out $W --budget 85 --check-timeout 50 --rep 30 \
  --configs 64:2,2,1,168,1,0,0,1,1,1 > $W/hopper_bwd_d64.txt 2>&1
stamp "hopper_bwd d64 rc=$?"; grep -E "causal=|summary" $W/hopper_bwd_d64.txt | cut -c1-400
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
