#!/usr/bin/env bash
# Session 10, batch B6: the whole GPU suite on the final tree (the host rule, the key-range skip
# off on TMA GPUs, the ALiBi per-key bias, the tuner's runtime launcher).
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
timeout 220 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE tests > "$OUT/gpu_tests.txt" 2>&1
stamp "gpu tests rc=$?"; grep -E "passed|failed|FAILED|ERROR" "$OUT/gpu_tests.txt" | tail -12
