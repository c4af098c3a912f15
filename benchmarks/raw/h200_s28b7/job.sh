#!/usr/bin/env bash
# Prepared in session 28 (issue 14; not run then: no device time left), about 330 s. The new
# backward knob HopperBwdConfig.dv_early (dV's product issued before the wait for dP, so ptxas
# keeps that wait after P's exponentials: in static SASS of the shipped non-causal configs only
# 5-6 of a thread's 32 exponentials ran beside dP, with the knob all 32; causal configs had all
# 32 already). (1) its GPU float64 cases (test_matches_float64, two dv_early configs); (2)
# dv_early on top of every shape's shipped config over the 18-shape grid (bwd_variants.py,
# three alternating rounds, float64 checks first).
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b7/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_hopper_bwd.py -k "matches_float64 and (early or shipped)" -p no:randomly > $W/gpu_tests.txt 2>&1
stamp "GPU tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_tests.txt | tail -6 | cut -c1-400
timeout 300 python3 benchmarks/bwd_variants.py --out $W --budget 260 --rounds 3 \
  --vary E=dv_early:1 > $W/bwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -v '^{"shape"' $W/bwd_variants.txt | tail -6 | cut -c1-300
grep '^{"shape"' $W/bwd_variants.txt | cut -c1-300
