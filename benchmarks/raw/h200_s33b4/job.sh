#!/usr/bin/env bash
# Session 33 B4 (issue 16): the MUFU forms' rates (benchmarks/mufu_rates.py): whether packed
# 16-bit tanh / ex2 retire faster than float32 on the H200 (the softcapped forward is MUFU-bound).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b4/job.sh     (about 30 s), carrying .whl
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv
python3 benchmarks/mufu_rates.py --iters 256 2>&1 | grep -v Warn
python3 benchmarks/mufu_rates.py --iters 1024 2>&1 | grep -v Warn
stamp done
