#!/usr/bin/env bash
# Session 18 B6: a gathered mask tensor's tile loaded before the wait for its QK^T in the
# Hopper forward (_mask_ahead; issue 16's bias [1, H, N, N] and bool [B, 1, N, N] rows, which
# run the portable family unless FLASHGEN_FWD_FAMILY=hopper). GPU tests of the Hopper mask
# tensors, then masks.py on those two rows, forward: the default (portable), the Hopper family
# forced on this tree and on old_tree (abfc742, before the change), alternating processes.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b6/job.sh carrying .whl and old_tree.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py -k "mask" > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -8 | cut -c1-300
ROWS=attn_mask_bias_causal,attn_mask_bool_b1nn
for r in 1 2; do
  for v in portable hopper_new hopper_old; do
    case $v in
      portable) PP=/tmp/site:$PWD; FAM=;;
      hopper_new) PP=/tmp/site:$PWD; FAM=hopper;;
      hopper_old) PP=/tmp/site:$PWD/old_tree:$PWD; FAM=hopper;;
    esac
    FLASHGEN_FWD_FAMILY=$FAM PYTHONPATH=$PP timeout 90 python3 benchmarks/masks.py --only $ROWS --dirs fwd --no-check --out $W/masks_${v}_$r.csv > $W/masks_${v}_$r.txt 2>&1
    stamp "masks $v $r rc=$?"; grep -E "name=" $W/masks_${v}_$r.txt | sed -E 's/ b=4.*dir=fwd//' | cut -c1-200
  done
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
