#!/usr/bin/env bash
# Session 28 B5 (run as one command line, kept here split), about 230 s: the whole GPU suite.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $W/gpu_suite.txt 2>&1
stamp "suite rc=$?"
