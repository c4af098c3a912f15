#!/usr/bin/env bash
# Session 37 B7 (issue 13), on B6's warm machine, carrying .whl: the 650 TFLOP/s row again with
# eleven rounds (B6 read five). The command as run:
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2,8 --rounds 11 --rep 40 \
  --vary ts4=tail_split:4@128f --check-dtypes bfloat16 --budget 140 --out $OUT/tail11 > $OUT/tail11.txt 2>&1
echo rc=$?; grep '"tflops"' $OUT/tail11.txt | cut -c1-200
nvidia-smi --query-gpu=clocks.sm,power.draw,power.limit,temperature.gpu --format=csv
