#!/usr/bin/env bash
# Session 47: the ModernBERT regression probe (mbert_probe.py).
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
for m in "x" "x hulljit" "x jit"; do
  timeout 150 python3 -u benchmarks/raw/next_s47/mbert_probe.py model $m > "$OUT/model_${m// /_}.txt" 2>&1; stamp "$m rc=$?"
  grep -E "^fwd|^check|key_hull|every" "$OUT/model_${m// /_}.txt" | cut -c1-150
done
