#!/usr/bin/env bash
# Session 26 B2 (issue 14), about 400 s: dQ's product before dK's (dq_first) against the
# shipped configs, float64 checks first (order_ab.py); then the Hopper backward's GPU tests.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 300 python3 benchmarks/raw/h200_s26b2/order_ab.py $W/order_ab.json 3 200 > $W/order_ab.txt 2>&1
stamp "ab rc=$?"; grep -v "^{" $W/order_ab.txt | tail -8 | cut -c1-300; python3 -c "
import json; d=json.load(open('$W/order_ab.json'))
print(d['checks'])
for r in d['rows']: print(r['shape'], r['causal'], {k: round(v,4) for k,v in r['median'].items()}, r['ratio'], r['rel_diff'])
"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py -p no:randomly > $W/gpu_tests.txt 2>&1
stamp "tests rc=$?"; tail -5 $W/gpu_tests.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
