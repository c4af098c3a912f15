#!/usr/bin/env bash
# Session 26 B5 (issue 14), about 250 s: deeper Q/dO and K/V rings, dQ products in turns at head
# dim 128, and a persistent grid at head dim 128 without causal masking, against the shipped
# configs (ring_ab.py), float64 checks first.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 300 python3 benchmarks/raw/h200_s26b5/ring_ab.py $W/ring_ab.json 3 200 > $W/ring_ab.txt 2>&1
stamp "ab rc=$?"; grep -v "^{" $W/ring_ab.txt | tail -8 | cut -c1-300; python3 -c "
import json; d=json.load(open('$W/ring_ab.json'))
print(d['checks'])
for r in d['rows']: print(r['shape'], r['causal'], {k: round(v,4) for k,v in r['median'].items()}, r['ratio'], r['rel_diff'])
"
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
