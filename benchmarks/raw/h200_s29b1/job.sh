#!/usr/bin/env bash
# Session 29 B1 (issue 13), about 500 s: the forward's two opt-in knobs on the H200.
# late_wait (session 28: PV's wait pinned after the softmax, static SASS 64 of 64 exponentials
# beside PV) and the new lazy_rescale (O rescaled only when some row's max grew by more than
# 2**8: the rescale's multiply per element of O, as many as the tile's scores at head dim 128,
# skipped on most tiles; a named barrier a tile for the consumer-wide decision).
# (1) GPU float64 tests of both (layouts, masks with a lazy grid, keys growing along the
# sequence so the rescale runs on later tiles); (2) fwd_variants over the grid, each knob and
# both, five alternating rounds, with softcap 30; (3) head dim 128 16k not causal, 7 rounds.
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s29b1/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py -k "layouts or matches_float64 or lazy" -p no:randomly > $W/gpu_tests.txt 2>&1
stamp "GPU tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_tests.txt | tail -8 | cut -c1-400
timeout 250 python3 benchmarks/fwd_variants.py --out $W --budget 210 --rounds 5 --rep 30 \
  --check-dtypes bfloat16 --softcap 30 \
  --vary LW=late_wait:1 --vary Z=lazy_rescale:1 --vary LZ=late_wait:1,lazy_rescale:1 > $W/fwd_variants.txt 2>&1
stamp "fwd variants rc=$?"; grep -v '^{"shape"' $W/fwd_variants.txt | tail -16 | cut -c1-300
mkdir -p $W/hd128_16k
timeout 100 python3 benchmarks/fwd_variants.py --out $W/hd128_16k --budget 75 --rounds 7 --shapes 2,8 \
  --check-dtypes bfloat16 --vary LW=late_wait:1 --vary Z=lazy_rescale:1 --vary LZ=late_wait:1,lazy_rescale:1 > $W/hd128_16k/fwd_variants.txt 2>&1
stamp "16k rc=$?"; grep '^{"shape"' $W/hd128_16k/fwd_variants.txt | cut -c1-400
