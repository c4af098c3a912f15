#!/usr/bin/env bash
# Session 36 B5 (issue 15): op_gap.py (see its docstring).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b5/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 300 python3 benchmarks/raw/h200_s36b5/op_gap.py --rounds 9 > $OUT/op_gap.txt 2>&1
stamp "op_gap rc=$?"; grep -v -i warn $OUT/op_gap.txt | cut -c1-600
