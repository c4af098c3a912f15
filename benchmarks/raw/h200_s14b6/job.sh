#!/usr/bin/env bash
# Session 14, batch B6 (issue 16 and all): every masks.py row on the session's final kernels
# (the block-sparse walk on by default, whole key ranges flagged), then the whole GPU suite.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 210 python3 benchmarks/masks.py --budget 190 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|failed" $W/masks.txt | cut -c1-330
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
