#!/usr/bin/env bash
# Session 36 B6 (issue 15): the forward's smaller host margin (vendor.HOST_MARGIN_FWD_S, 10 µs).
# 1. The GPU tests of the choice (tests/runtime -m gpu). 2. The grid, the op against cuDNN with
# the A/A control, 21 rounds, as B4 (which ran the 50 µs margin for both). 3. The Llama block
# (its forward's expected saving ~3 µs: cuDNN under either margin; a control).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s36b6/job.sh      (carrying .whl)
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests/runtime \
  > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
timeout 260 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn --control --rounds 21 --rep 20 \
  --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "^B|worst|A/A control" | \
  sed 's/op vs fastest SDPA: //' | cut -c1-200
timeout 160 python3 benchmarks/llama_block.py --rounds 11 --rep 20 --out $W/llama_block.json \
  > $W/llama_block.txt 2>&1
stamp "llama rc=$?"; grep -v -i warn $W/llama_block.txt | tail -6 | cut -c1-400
cd $W && tar czf $OUT/b6.tgz .
