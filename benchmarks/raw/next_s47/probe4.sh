#!/usr/bin/env bash
# Session 47: masked_sweep2.py (thresholds), then the dense 4x16x2048 backward's kernels.
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 240 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/sweep2.csv > $OUT/sweep2.txt 2>&1; stamp "sweep2 rc=$?"
grep -v -i warn $OUT/sweep2.txt
timeout 100 python3 -u benchmarks/raw/next_s47/dense_prof.py > $OUT/dense_prof.txt 2>&1; stamp "dense prof rc=$?"
