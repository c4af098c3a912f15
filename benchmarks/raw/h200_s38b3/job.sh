#!/usr/bin/env bash
# Session 38 B3 (issue 15): where flashgen's forward+backward host time goes
# (bwd_host.py's docstring), carrying .whl:  FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b3/job.sh
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 200 python3 benchmarks/raw/h200_s38b3/bwd_host.py > $OUT/bwd_host.txt 2>&1
echo rc=$?; cat $OUT/bwd_host.txt
