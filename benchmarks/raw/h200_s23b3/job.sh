#!/usr/bin/env bash
# Session 23 B3, about 520 s (issues 14, 16): (1) the whole GPU suite on this tree (ALiBi at head
# dim 64 now portable unless forced; windows with key-padding masks on the hopper backward at
# head dim 128 from 4k; `rotate` back as an opt-in config); (2) B1's A/B again, with the config
# strings B1 got wrong (its "64" in the DQ_TMA field made both columns the same config with
# dq_turns on, rotate off): shipped / rotate / persistent, three alternating rounds per shape,
# medians (benchmarks/hopper_bwd.py --rounds); (3) the ALiBi rows at head dim 64 on the new
# default (the portable forward).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s23b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests --durations=10 > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_suite.txt | tail -8 | cut -c1-600
S=2,2,1,168,1,0,0,1,1,1,0,0; R=2,2,1,168,1,0,0,1,1,1,0,1; P=2,2,1,168,1,0,1,1,1,1,0,0
timeout 260 python3 benchmarks/hopper_bwd.py --out $W --budget 230 --check-timeout 70 --rounds 3 --rep 25 \
  --configs 64:$S 64:$R 64:$P 128:$S 128:$R 128:$P > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|causal=|summary|Error|budget" $W/hopper_bwd.txt | cut -c1-900
timeout 45 python3 benchmarks/masks.py --budget 38 --no-check --dirs fwd \
  --shape 4,32,8,4096,64 --only alibi_full,alibi_causal --out $W/masks_alibi_d64.csv > $W/masks_alibi_d64.txt 2>&1
stamp "masks alibi d64 rc=$?"; grep -E "name=|Error|failed" $W/masks_alibi_d64.txt | sed -E 's/ (b|hq|hkv|tflops|plain_tflops|pairs_frac)=[^ ]*//g' | cut -c1-240
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
