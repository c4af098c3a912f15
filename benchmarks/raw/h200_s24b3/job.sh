#!/usr/bin/env bash
# Session 24, batch B3 (issue 14), about 330 s: a dynamic persistent grid for the Hopper
# backward (programs draw the next untaken work item from a counter, as the Hopper forward's
# dynamic grid does): the static persistent grid read 0.72-0.88x causal in session 23 B3 and B1
# here (one program per SM walking the longest-first order round robin). GPU float64 tests of the
# new configs, then the A/B in five alternating rounds: shipped, static persistent (head dim 64),
# dynamic, dynamic with two dS slots, two dS slots alone (13th config field: dynamic).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s24b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/kernels/test_hopper_bwd.py \
  -k "matches_float64 and (dynamic or shipped or persistent)" > $W/gpu_tests.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $W/gpu_tests.txt
S=2,2,1,168,1,0,0,1,1,1,0; P=2,2,1,168,1,0,1,1,1,1,0
PD=2,2,1,168,1,0,1,1,1,1,0,1,1; PD2=2,2,1,168,1,0,1,1,1,1,0,2,1; D2=2,2,1,168,1,0,0,1,1,1,0,2
timeout 330 python3 benchmarks/hopper_bwd.py --out $W --budget 300 --check-timeout 80 --rounds 5 --rep 25 \
  --configs 64:$S 64:$P 64:$PD 64:$PD2 64:$D2 128:$S 128:$PD 128:$PD2 128:$D2 > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|summary|Error|budget" $W/hopper_bwd.txt | cut -c1-1500
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
