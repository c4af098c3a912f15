#!/usr/bin/env bash
# Session 36 B10 (issue 15): mix_host.py (see its docstring).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b10/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 120 python3 benchmarks/raw/h200_s36b10/mix_host.py > $OUT/mix_host.txt 2>&1
stamp "mix_host rc=$?"; grep -v -i warn $OUT/mix_host.txt | cut -c1-400
