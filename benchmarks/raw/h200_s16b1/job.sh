#!/usr/bin/env bash
# Prepared in session 15 (no device time left), for the next session: the dropout draw as one
# 32-bit hash a score (main from b264a46) against old_tree/, the Philox draw it replaced:
#   rm -rf old_tree && mkdir old_tree && git archive 2d12268 flashgen templates | tar -x -C old_tree
# GPU tests of dropout against float64, then masks.py's dropout row (fwd and fwd+bwd, ratio to
# the unmasked kernel and to SDPA) new/old/new, and the per-kernel times of the dropout call.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_dropout_hash/job.sh, carrying .whl and
# old_tree; move it to benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_dropout.py tests/kernels/test_alibi.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 150 python3 benchmarks/masks.py --only dropout_causal --budget 120 --out $W/masks_$r.csv > $W/masks_$r.txt 2>&1
  stamp "masks $r rc=$?"; grep -E "check|name=|Error" $W/masks_$r.txt | cut -c1-330
done
timeout 100 python3 benchmarks/mask_kernels.py --wall --only dropout_causal > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"; grep -E "wall|attn_" $W/mask_kernels.txt | cut -c1-120
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
