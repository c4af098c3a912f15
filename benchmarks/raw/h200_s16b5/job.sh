#!/usr/bin/env bash
# Session 16, batch B5 (issue 16): the dropout draw without lowbias32's last xorshift: its GPU
# tests, then masks.py's dropout row (float64 check, forward and forward+backward; B1's readings
# on 1e217fb are the before). Results written as they come (no tar: the budget was short).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_dropout.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -2 $W/pytest_gpu.txt | cut -c1-300
timeout 60 python3 benchmarks/masks.py --only dropout_causal --budget 30 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error" $W/masks.txt | cut -c1-330
stamp end
