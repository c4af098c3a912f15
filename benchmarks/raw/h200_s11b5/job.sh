#!/usr/bin/env bash
# Session 11, batch B5 (issue 16): the Hopper key-padding forward with the vector loaded a tile
# ahead and the additive clamp (GPU tests), its speed three ways (hull + Hopper, Hopper without
# the hull, the portable family), and the ALiBi backward A/B (this tree vs old_tree/ = 00d7404,
# alternated twice, forward+backward).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_hopper.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_attn_mask.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|^E " $W/pytest_gpu.txt | cut -c1-300 | tail -25
timeout 90 python3 benchmarks/masks.py --only attn_mask_bool_pad --dirs fwd --budget 70 --out $W/masks_pad_hull.csv > $W/masks_pad_hull.txt 2>&1
stamp "masks pad hull rc=$?"; grep -E "name=|check" $W/masks_pad_hull.txt | cut -c1-420
PAD="--only attn_mask_bool_pad --dirs fwd"
timeout 90 python3 benchmarks/masks.py --no-check $PAD --no-hull --budget 70 --out $W/masks_pad_nohull.csv > $W/masks_pad_nohull.txt 2>&1
stamp "pad no hull rc=$?"; grep name= $W/masks_pad_nohull.txt | cut -c1-420
FLASHGEN_FWD_FAMILY=portable timeout 90 python3 benchmarks/masks.py --no-check $PAD --budget 70 --out $W/masks_pad_portable.csv > $W/masks_pad_portable.txt 2>&1
stamp "pad portable rc=$?"; grep name= $W/masks_pad_portable.txt | cut -c1-420
for r in 1 2; do for tree in new old; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=$PYTHONPATH; fi
  PYTHONPATH=$PP timeout 90 python3 benchmarks/masks.py --no-check --only alibi_causal,alibi_full --dirs fwd+bwd \
    --budget 70 --out $W/masks_alibi_${tree}_$r.csv > $W/masks_alibi_${tree}_$r.txt 2>&1
  stamp "alibi $tree $r rc=$?"; grep name= $W/masks_alibi_${tree}_$r.txt | cut -c1-60,150-420
done; done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
