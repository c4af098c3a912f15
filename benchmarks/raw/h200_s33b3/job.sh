#!/usr/bin/env bash
# Session 33 B3 (issue 16): softcapping without the running max (FIXED_MAX, cap * log2(e) <= 80).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b3/job.sh     (about 400 s), carrying .whl
# The float64 GPU cases of the Hopper masks (caps 20, 30, 2.5 fixed; 60 with the running max),
# the caps' ends (every score at -cap or +cap), the plans' signatures; then masks.py's softcap
# rows at cap 50 (fixed) and 60 (running max) against the unmasked kernel and SDPA, head dims
# 128 and 64. Results in $OUT/b3.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > $W/gpu.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 4 tests/kernels/test_hopper.py \
  -k "masks_match_float64 or fixed_max or plan" > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
SOFT=softcap_causal,softcap_full,softcap60_causal,softcap60_full
timeout 200 python3 benchmarks/masks.py --only $SOFT --dirs fwd,fwd+bwd --rounds 5 --shape 4,16,4,4096,128 \
  --out $W/masks_d128.csv > $W/masks_d128.txt 2>&1
stamp "masks d128 rc=$?"; grep -vi warn $W/masks_d128.txt | grep -E "ratio|FAIL|err" | cut -c1-220 | tail -16
timeout 140 python3 benchmarks/masks.py --no-check --only $SOFT --dirs fwd,fwd+bwd --rounds 5 \
  --shape 4,32,8,4096,64 --out $W/masks_d64.csv > $W/masks_d64.txt 2>&1
stamp "masks d64 rc=$?"; grep -vi warn $W/masks_d64.txt | grep -E "ratio|FAIL" | cut -c1-220 | tail -8
cd $W && tar czf $OUT/b3.tgz .
