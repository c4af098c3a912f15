#!/usr/bin/env bash
# Session 9, batch B4: the GPU tests fixed after B3 (ALiBi bf16 against SDPA's own bf16 error,
# the ALiBi backend test), the launch tests with the Hopper forward's lse in the scratch
# buffer, the Hopper tests, and host time at head dim 128 (Hopper family) after that change.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
timeout 150 python3 -m pytest -m gpu -n 12 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py tests/compile/test_patterns_alibi.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_hopper.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "gpu tests rc=$?"; tail -8 "$OUT/pytest_gpu.txt"
timeout 60 python3 benchmarks/host_time.py --label s9b4-hopper --shape 1,1,128,128 --rounds 11 --out "$OUT/host_hopper.json" | tail -16
stamp "host hopper rc=$?"
