#!/usr/bin/env bash
# Session 13, batch B1 (issue 16): mask tensors' tiles loaded before the dot and the programs
# sharing a mask launched side by side (MASK_SHARED), against a04468a (old_tree/, a copy of
# that commit's flashgen/ and templates/, first on PYTHONPATH); the tile sweep for windows.
# 1. the mask GPU tests; 2. masks.py new, then old; 3. window_tiles.py.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
V=attn_mask_bias_causal,attn_mask_bool_b1nn,attn_mask_bool_pad
# old first: its kernels compile while nothing else runs; the new tree's checks come after
PYTHONPATH=/tmp/site:$PWD/old_tree:$PWD timeout 130 python3 benchmarks/masks.py --only $V --no-check --budget 110 --out $W/masks_old.csv > $W/masks_old.txt 2>&1
stamp "masks old rc=$?"; grep -E "name=|Error" $W/masks_old.txt | cut -c1-330
timeout 150 python3 benchmarks/masks.py --only $V --budget 130 --out $W/masks_new.csv > $W/masks_new.txt 2>&1
stamp "masks new rc=$?"; grep -E "check|name=|Error" $W/masks_new.txt | cut -c1-330
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py tests/kernels/test_bias_grad.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -3 $W/pytest_gpu.txt
timeout 200 python3 benchmarks/window_tiles.py --budget 170 --workers 14 --out $W > $W/window_tiles.txt 2>&1
stamp "window tiles rc=$?"; grep -v Warn $W/window_tiles.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
