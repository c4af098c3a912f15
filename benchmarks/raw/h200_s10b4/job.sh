#!/usr/bin/env bash
# Session 10, batch B4 (issues 15, 16): the Llama block with the host rule (8021ecb); the ALiBi
# forward that adds only a per-key bias per tile (7a2681c): GPU tests, then its speed against the
# unmasked kernel and SDPA (forced Hopper forward, as S9 B6; then fwd+bwd with the family's own
# choice); the key-padding bool mask with the key-range skip (never timed).
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/llama_block.py --rounds 7 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama block rc=$?"; grep -v "Warn\|run_backward" $W/llama_block.txt | tail -8
timeout 100 python3 -m pytest -m gpu -n 4 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py tests/compile/test_patterns_alibi.py > $W/pytest_alibi.txt 2>&1
stamp "alibi gpu tests rc=$?"; tail -4 $W/pytest_alibi.txt
FLASHGEN_FWD_FAMILY=hopper timeout 80 python3 benchmarks/masks.py --only alibi_causal,alibi_full \
  --shape 4,16,4,4096,128 --dirs fwd --budget 60 --out $W/masks_alibi_hopper.csv > $W/masks_alibi_hopper.txt 2>&1
stamp "masks alibi hopper rc=$?"; tail -8 $W/masks_alibi_hopper.txt
timeout 100 python3 benchmarks/masks.py --no-check --only alibi_causal,alibi_full,attn_mask_bool_pad \
  --shape 4,16,4,4096,128 --dirs fwd,fwd+bwd --budget 80 --out $W/masks_auto.csv > $W/masks_auto.txt 2>&1
stamp "masks auto rc=$?"; tail -10 $W/masks_auto.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
