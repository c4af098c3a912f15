#!/usr/bin/env bash
# Session 12, batch B5 (issue 16): dropout's 16-bit Philox draws restored (keep_tile), the
# SRAM model counting its keep tile, dropout's dQ kernel on its own (128, 64, 8, 3) config:
# the dropout GPU tests (incl. the d128 full case that ran out of shared memory in S11 B3),
# then masks.py's dropout row (B3 read 3.12 ms forward, 10.82 forward+backward, one draw a score).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_dropout.py tests/compile/test_patterns_dropout.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|rror" $W/pytest_gpu.txt | cut -c1-250 | tail -8
timeout 120 python3 benchmarks/masks.py --only dropout_causal --dirs fwd,fwd+bwd --budget 100 --out $W/masks_drop.csv > $W/masks_drop.txt 2>&1
stamp "masks rc=$?"; grep -E "name=|check" $W/masks_drop.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
