#!/usr/bin/env bash
# Session 12, batch B8 (issue 16): causal variants back on the backward config for the dQ kernel
# (non-causal keep the dQ kernel's own): the dropout GPU tests and masks.py's causal rows whose
# dQ config changed back (window 256 and 1024, dropout, ALiBi, right key padding).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_dropout.py tests/kernels/test_window.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|rror" $W/pytest_gpu.txt | cut -c1-250 | tail -6
timeout 150 python3 benchmarks/masks.py --no-check --only window_causal_256,window_causal_1024,dropout_causal,alibi_causal,pad_right_causal \
  --dirs fwd+bwd --budget 120 --out $W/masks_causal.csv > $W/masks_causal.txt 2>&1
stamp "masks rc=$?"; grep -E "name=" $W/masks_causal.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
