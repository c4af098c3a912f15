#!/usr/bin/env bash
# Session 9, batch B4: the GPU tests fixed after B3 (ALiBi bf16 against SDPA's own bf16 error,
# the ALiBi backend test), the launch tests with the Hopper forward's lse in the scratch
# buffer, the Hopper tests, and host time at head dim 128 (Hopper family) after that change.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
timeout 150 python3 -m pytest -m gpu -n 12 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py tests/compile/test_patterns_alibi.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_hopper.py > "$OUT/pytest_gpu.txt" 2>&1
stamp "gpu tests rc=$?"; tail -8 "$OUT/pytest_gpu.txt"
timeout 60 python3 benchmarks/host_time.py --label s9b4-hopper --shape 1,1,128,128 --rounds 11 --out "$OUT/host_hopper.json" | tail -16
stamp "host hopper rc=$?"
