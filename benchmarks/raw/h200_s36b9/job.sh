#!/usr/bin/env bash
# Session 36 B9 (issue 15): mix_margin.py (see its docstring).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b9/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 200 python3 benchmarks/raw/h200_s36b9/mix_margin.py --rounds 15 > $OUT/mix_margin.txt 2>&1
stamp "mix_margin rc=$?"; grep -v -i warn $OUT/mix_margin.txt | cut -c1-500
