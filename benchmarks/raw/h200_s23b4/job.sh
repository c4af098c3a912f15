#!/usr/bin/env bash
# Session 23 B4 (one inline command, written down here): the whole GPU suite on the session's
# final kernels and defaults (tree 313e607), 2026-12-02 ~20:58 UTC, H200.
# Run as FLASHGEN_COMMIT=313e607 bash benchmarks/raw/h200_s23b4/job.sh carrying .whl.
. benchmarks/device_env.sh > /dev/null 2>&1; mkdir -p $OUT/w
timeout 330 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $OUT/w/gpu_suite.txt 2>&1
echo rc=$?; grep -E "passed|failed|FAILED|Error" $OUT/w/gpu_suite.txt | tail -8 | cut -c1-500
