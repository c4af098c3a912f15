#!/usr/bin/env bash
# Session 14, batch B2 (issue 16): the block-sparse walk on by default with its lists built by
# one kernel (flashgen/kernels/tile_kinds.py): GPU tests (forward and both backward walks against
# float64), masks.py's [B, 1, N, N] row on and off, its kernels one by one; dropout's and
# softcap's kernels per config (masked_tiles.py's new rows).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py tests/kernels/test_dropout.py tests/kernels/test_window.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -6 $W/pytest_gpu.txt | cut -c1-300
for r in 1 2; do
  timeout 120 python3 benchmarks/masks.py --only attn_mask_bool_b1nn --budget 100 --out $W/masks_sparse_$r.csv > $W/masks_sparse_$r.txt 2>&1
  stamp "masks sparse(default) $r rc=$?"; grep -E "check|name=|Error" $W/masks_sparse_$r.txt | cut -c1-330
done
FLASHGEN_BLOCK_SPARSE=0 timeout 120 python3 benchmarks/masks.py --only attn_mask_bool_b1nn --budget 100 --out $W/masks_off.csv > $W/masks_off.txt 2>&1
stamp "masks off rc=$?"; grep -E "check|name=|Error" $W/masks_off.txt | cut -c1-330
timeout 100 python3 benchmarks/mask_kernels.py --only attn_mask_bool_b1nn > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"; cut -c1-160 $W/mask_kernels.txt | grep -v Warn | tail -16
timeout 260 python3 benchmarks/masked_tiles.py --only dropout_causal,softcap_causal --budget 240 --workers 14 --out $W > $W/masked_tiles.txt 2>&1
stamp "masked tiles rc=$?"; grep -v Warn $W/masked_tiles.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
