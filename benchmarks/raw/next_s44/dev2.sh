#!/usr/bin/env bash
# Prepared in session 45 and not run (every call made with it got no machine; dev3.sh ran). For
# a later call: on an H200 the bar figures of next_s43's `h200` part, closest bars
# first (issue 15's host time, issue 13's 650 TFLOP/s row, then issue 16's window sweep); on an
# H100 BLOOM under HF's gradient checkpointing (its ALiBi bias now copied into the checkpointed
# layers), then the checkpointed training example (next_s44 `train`).
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-5f7c4dd}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"
. benchmarks/device_env.sh > /dev/null 2>&1
if echo "$name" | grep -q H200; then
  bash benchmarks/raw/h100_s42b1/job.sh host
  timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2 --rounds 11 --rep 40 \
    --vary ts4=tail_split:4@128f --check-dtypes bfloat16 --budget 140 --out $OUT/tflops \
    > $OUT/tflops.txt 2>&1
  stamp "tflops rc=$?"; grep '"tflops"' $OUT/tflops.txt | cut -c1-200
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
  bash benchmarks/raw/h100_s42b1/job.sh windows
else
  for pad in none left; do
    timeout 150 python3 -u benchmarks/hf_padded.py --family bloom --attn eager --checkpointing \
      --pad $pad --out $OUT/bloom_ckpt_$pad.json > $OUT/bloom_ckpt_$pad.txt 2>&1
    stamp "bloom ckpt $pad rc=$?"; grep -E "^fwd|^check|baddbmm" $OUT/bloom_ckpt_$pad.txt | cut -c1-250
  done
  bash benchmarks/raw/next_s44/job.sh train
fi
