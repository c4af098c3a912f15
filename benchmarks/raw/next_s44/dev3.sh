#!/usr/bin/env bash
# Session 45's last call (about 250 s of device time left): one part only. H200: issue 15's host
# time; H100: BLOOM under HF's gradient checkpointing without an attention_mask (ALiBi slopes).
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-d2c60dd}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"
. benchmarks/device_env.sh > /dev/null 2>&1
if echo "$name" | grep -q H200; then
  bash benchmarks/raw/h100_s42b1/job.sh host
else
  timeout 150 python3 -u benchmarks/hf_padded.py --family bloom --attn eager --checkpointing \
    --pad none --out $OUT/bloom_ckpt_none.json > $OUT/bloom_ckpt_none.txt 2>&1
  stamp "bloom ckpt none rc=$?"; grep -E "^fwd|^check|baddbmm" $OUT/bloom_ckpt_none.txt | cut -c1-250
fi
