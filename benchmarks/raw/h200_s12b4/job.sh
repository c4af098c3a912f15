#!/usr/bin/env bash
# Session 12, batch B4: the key-padding GPU tests with the float64 reference fixed (an added row
# of -inf sent NaN gradients through autograd: B3's one failure), and pad_right_causal's forward
# again (B3 read 0.558 ms where B1 read 0.372; nothing in its lengths path changed).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_hopper.py tests/kernels/test_attn_mask.py \
  tests/kernels/test_padding.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED" $W/pytest_gpu.txt | cut -c1-250 | tail -8
timeout 100 python3 benchmarks/masks.py --no-check --only pad_right_causal,pad_left_causal,pad_right_full --dirs fwd,fwd+bwd \
  --budget 80 --out $W/masks_pad.csv > $W/masks_pad.txt 2>&1
stamp "masks rc=$?"; grep -E "name=" $W/masks_pad.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
