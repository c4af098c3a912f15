#!/usr/bin/env bash
# Session 47: dense masks at 1k x 1k with the block lists (MIN_SCORES 2^18) and without.
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 100 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/dense1k_lists.csv --dense1k --min-scores 262144 2>&1 | grep -v -i warn
timeout 100 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/dense1k.csv --dense1k 2>&1 | grep -v -i warn
