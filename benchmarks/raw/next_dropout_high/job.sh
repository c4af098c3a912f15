#!/usr/bin/env bash
# Prepared in session 16 (no device time left to start it), for the next session: the dropout draw without lowbias32's last xorshift: its GPU
# tests, then masks.py's dropout row (float64 check, forward and forward+backward; B1's readings
# on 1e217fb are the before). Results written as they come. Run as FLASHGEN_COMMIT=<sha> bash
# benchmarks/raw/next_dropout_high/job.sh carrying .whl; move it to benchmarks/raw/h200_s<N>b<K>/.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_dropout.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -2 $W/pytest_gpu.txt | cut -c1-300
timeout 60 python3 benchmarks/masks.py --only dropout_causal --budget 30 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error" $W/masks.txt | cut -c1-330
stamp end
