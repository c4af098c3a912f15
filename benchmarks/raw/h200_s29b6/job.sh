#!/usr/bin/env bash
# Session 29 B6 on 85b0d56: the whole GPU suite.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 320 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $OUT/gpu_suite.txt 2>&1
