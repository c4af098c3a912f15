#!/usr/bin/env bash
# Session 17, batch B5 (run inline on the warm B4 machine, tree 284edf5): the key-padding GPU
# tests after the test's causal average was mended (B4 failed on the test's own reference).
. benchmarks/device_env.sh >/dev/null 2>&1; mkdir -p $OUT
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py -k "key_padding" > $OUT/pytest_keypad.txt 2>&1
echo rc=$?; grep -E "passed|failed|FAILED" $OUT/pytest_keypad.txt | tail -8
