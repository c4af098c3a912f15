#!/usr/bin/env bash
# Session 9, batch B6: ALiBi in the Hopper forward family (taken when forced): its GPU tests
# against float64, then the alibi mask rows with FLASHGEN_FWD_FAMILY=hopper.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
timeout 75 python3 -m pytest -m gpu -n 4 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py -k hopper_forward > "$OUT/pytest_gpu.txt" 2>&1
stamp "gpu tests rc=$?"; tail -4 "$OUT/pytest_gpu.txt"
FLASHGEN_FWD_FAMILY=hopper timeout 75 python3 benchmarks/masks.py --only alibi_causal,alibi_full \
  --shape 4,16,4,4096,128 --dirs fwd --budget 60 --out "$OUT/masks_alibi_hopper.csv" 2>&1 | tail -6
stamp "masks rc=$?"
