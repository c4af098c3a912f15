#!/usr/bin/env bash
# Session 27 B1 (issues 13, 16): the forward's exponentials split between the MUFU unit and a
# cubic on the FMA units (HopperConfig.exp_emu: 1, 2 or 3 of every four on the FMA units), A/B
# against the shipped configs (benchmarks/fwd_variants.py), without and with a logit softcap of
# 30 (whose tanh takes the MUFU unit too). float64 checks first (bf16), then the exp_emu GPU
# tests (tests/kernels/test_hopper.py: every setting, softcap, a window, fp16).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s27b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 450 python3 benchmarks/fwd_variants.py --out $W --budget 380 --rounds 3 --rep 20 \
  --shapes 3,4,5,0,1,2,7 --softcap 30 --check-dtypes bfloat16 \
  --vary e1=exp_emu:1 --vary e2=exp_emu:2 --vary e3=exp_emu:3@64 > $W/fwd_variants.txt 2>&1
stamp "fwd variants rc=$?"; grep -v '^{"shape"' $W/fwd_variants.txt | tail -24 | cut -c1-300
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_hopper.py -k exp_emu > $W/gpu_tests.txt 2>&1
stamp "exp_emu GPU tests rc=$?"; tail -4 $W/gpu_tests.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
