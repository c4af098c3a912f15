#!/usr/bin/env bash
# Session 17, batch B1 (prepared in session 16 as next_dropout_high, plus the whole GPU suite):
# the dropout draw without lowbias32's last xorshift (835338d, not yet run on a GPU): its GPU
# tests, then masks.py's dropout row (float64 check, forward and forward+backward; session 16
# B1's readings on 1e217fb are the before); then `pytest -m gpu` over every test, since af82f0b
# (Launch's retry path, the SRAM model's dq_delta entries) ran on the CPU only.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s17b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 110 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_dropout.py > $W/pytest_dropout.txt 2>&1
stamp "pytest dropout rc=$?"; tail -2 $W/pytest_dropout.txt | cut -c1-300
timeout 60 python3 benchmarks/masks.py --only dropout_causal --budget 30 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|allocator|Error" $W/masks.txt | cut -c1-330
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -15 | cut -c1-300
stamp end
