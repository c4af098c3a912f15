#!/usr/bin/env bash
# Session 33 B8 (issue 16): FIXED_MAX in the portable forward too (head dims the Hopper family
# does not render: Gemma-2's 256). About 200 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b8/job.sh
# The softcap GPU tests (portable at head dim 256 both ways, the Hopper family's cases), then
# masks.py's softcap rows at head dim 256 (cap 50: FIXED_MAX; 60: the running max), forward.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 4 tests/kernels/test_softcap.py \
  tests/kernels/test_hopper.py -k "softcap or bf16_on_gpu or fixed_max or masks_match" > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
timeout 120 python3 benchmarks/masks.py --no-check --only softcap_causal,softcap_full,softcap60_causal,softcap60_full \
  --dirs fwd --rounds 5 --shape 4,8,4,4096,256 --out $W/masks_d256.csv > $W/masks_d256.txt 2>&1
stamp "masks d256 rc=$?"; grep -E "^name=" $W/masks_d256.txt | cut -c1-230
cd $W && tar czf $OUT/b8.tgz .
