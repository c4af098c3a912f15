#!/usr/bin/env bash
# Prepared in session 28 (issue 13; not run then: no device time left), about 300 s. The new
# forward knob HopperConfig.late_wait (a shared-memory store of each tile's row sums before the
# wait for the previous tile's PV, which keeps ptxas from hoisting that wait to the softmax's
# start: static SASS of every shipped config showed no exponential between the QK^T wait and
# the PV wait, with the knob all 64 of a tile; tests/kernels/test_hopper.py checks it ahead of
# time). (1) its GPU float64 cases (LAYOUT_CASES, three with late_wait); (2) late_wait on top of
# every shape's shipped config, and with ping-pong at head dim 128, over the whole grid and
# with softcap 30 (fwd_variants.py, five alternating rounds; float64 checks first); (3) the
# head dim 128 16k non-causal shape alone, seven rounds, for the 650 TFLOP/s bar.
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b6/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py -k "layouts or matches_float64" -p no:randomly > $W/gpu_tests.txt 2>&1
stamp "GPU tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_tests.txt | tail -6 | cut -c1-400
timeout 260 python3 benchmarks/fwd_variants.py --out $W --budget 220 --rounds 5 --rep 30 \
  --check-dtypes bfloat16 --softcap 30 \
  --vary LW=late_wait:1 --vary ppLW=pingpong:1,late_wait:1@128 > $W/fwd_variants.txt 2>&1
stamp "fwd variants rc=$?"; grep -v '^{"shape"' $W/fwd_variants.txt | tail -14 | cut -c1-300
mkdir -p $W/hd128_16k
timeout 90 python3 benchmarks/fwd_variants.py --out $W/hd128_16k --budget 70 --rounds 7 --shapes 2,8 \
  --check-dtypes bfloat16 --vary LW=late_wait:1 > $W/hd128_16k/fwd_variants.txt 2>&1
stamp "16k rc=$?"; grep '^{"shape"' $W/hd128_16k/fwd_variants.txt | cut -c1-400
