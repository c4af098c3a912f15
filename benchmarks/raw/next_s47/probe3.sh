#!/usr/bin/env bash
# Session 47: ModernBERT with cold Triton / Inductor caches, then again warm.
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
export TRITON_CACHE_DIR=/tmp/cold_triton TORCHINDUCTOR_CACHE_DIR=/tmp/cold_inductor
rm -rf $TRITON_CACHE_DIR $TORCHINDUCTOR_CACHE_DIR
for run in cold warm; do
  timeout 200 python3 -u benchmarks/raw/next_s47/mbert_probe.py model x > $OUT/model_$run.txt 2>&1; stamp "$run rc=$?"
  grep -E "^fwd|^check|^compile" $OUT/model_$run.txt | cut -c1-150
done
