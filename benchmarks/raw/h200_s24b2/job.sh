#!/usr/bin/env bash
# Session 24, batch B2 (issue 14), about 330 s: B1's profile of the head dim 64 backward showed
# consumer 1 waiting for Q/dO (10.6% of all stall samples) while consumer 0 ran every step's
# dQ product and its reduce-add chain (~35% of its samples): dq_turns alone did not help
# (session 21 B1) because the single dS slot made the other consumer wait for that product
# before storing its next dS. ds_bufs=2 gives the exchange two slots. GPU float64 tests of the
# new configs first, then the A/B in five alternating rounds (the 12th config field ds_bufs).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s24b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/kernels/test_hopper_bwd.py \
  -k "matches_float64" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt
S=2,2,1,168,1,0,0,1,1,1,0; P=2,2,1,168,1,0,1,1,1,1,0
T2=2,2,1,168,1,0,0,1,1,1,1,2; T2P=2,2,1,168,1,0,1,1,1,1,1,2; D2=2,2,1,168,1,0,0,1,1,1,0,2
D2P=2,2,1,168,1,0,1,1,1,1,0,2
timeout 300 python3 benchmarks/hopper_bwd.py --out $W --budget 270 --check-timeout 80 --rounds 5 --rep 25 \
  --configs 64:$S 64:$P 64:$T2 64:$T2P 64:$D2 128:$S 128:$D2 128:$D2P > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|summary|Error|budget" $W/hopper_bwd.txt | cut -c1-1200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
