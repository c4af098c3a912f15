#!/usr/bin/env bash
# Session 11, batch B4 (issue 16): after B3's fixes (b5b628f: the Hopper band condition
# parenthesised; additive per-key masks forced-only) and the ALiBi backward's per-key vector
# (96a905a, merged 081018f): GPU tests of the touched kernels, masks.py (key padding, ALiBi
# fwd+bwd) on this tree, then on the tree before the session's kernel changes (old_tree/ =
# 00d7404) in a second process, back to back.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 220 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_hopper.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_attn_mask.py tests/kernels/test_padding.py tests/kernels/test_alibi.py tests/kernels/test_dropout.py \
  tests/compile/test_patterns_alibi.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | cut -c1-300 | tail -25
python3 - <<'PY' 2>&1 | grep -v Warn | tail -3
import torch
from flashgen.kernels import hopper
from flashgen.kernels.validate import expand_mask
q = torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
k = v = torch.randn(4, 4, 4096, 128, device="cuda", dtype=torch.bfloat16)
keep = (torch.arange(4096, device="cuda")[None, :] < torch.tensor([[4096], [2000], [3000], [1500]], device="cuda"))
for causal in (False, True):
    print("bool key padding takes the Hopper forward with the hull, causal", causal, ":",
          hopper.takes_key_hull(q, k, v, expand_mask(keep[:, None, None, :], q, k), causal=causal))
PY
for tree in new old; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; CHK=--no-check; else PP=$PYTHONPATH; CHK=; fi
  PYTHONPATH=$PP timeout 170 python3 benchmarks/masks.py $CHK --only attn_mask_bool_pad,alibi_causal,alibi_full --dirs fwd,fwd+bwd \
    --budget 140 --out $W/masks_$tree.csv > $W/masks_$tree.txt 2>&1
  stamp "masks $tree rc=$?"; grep -v Warn $W/masks_$tree.txt | grep -E "name=|err|FAIL|check" | cut -c1-420
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
