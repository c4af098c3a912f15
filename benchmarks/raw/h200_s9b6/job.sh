#!/usr/bin/env bash
# Session 9, batch B6: ALiBi in the Hopper forward family (taken when forced): its GPU tests
# against float64, then the alibi mask rows with FLASHGEN_FWD_FAMILY=hopper.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
timeout 75 python3 -m pytest -m gpu -n 4 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py -k hopper_forward > "$OUT/pytest_gpu.txt" 2>&1
stamp "gpu tests rc=$?"; tail -4 "$OUT/pytest_gpu.txt"
FLASHGEN_FWD_FAMILY=hopper timeout 75 python3 benchmarks/masks.py --only alibi_causal,alibi_full \
  --shape 4,16,4,4096,128 --dirs fwd --budget 60 --out "$OUT/masks_alibi_hopper.csv" 2>&1 | tail -6
stamp "masks rc=$?"
