#!/usr/bin/env bash
# Session 26 B1 (issue 14), about 300 s: session 25's prepared B5 with more variants:
# two dQ staging buffers a chunk (dq_bufs=2) and dQ over each consumer's own keys ("noshare", at
# 128 also with dq_split 2 and persistent; at 64 with three ring slots), against the shipped
# configs, float64 checks first (dq_bufs_ab.py).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 330 python3 benchmarks/raw/h200_s26b1/dq_bufs_ab.py $W/dq_bufs_ab.json 3 220 > $W/dq_bufs_ab.txt 2>&1
stamp "ab rc=$?"; grep -v "^{" $W/dq_bufs_ab.txt | tail -8 | cut -c1-300; python3 -c "
import json; d=json.load(open('$W/dq_bufs_ab.json'))
print(d['checks'])
for r in d['rows']: print(r['shape'], r['causal'], {k: round(v,4) for k,v in r['median'].items()}, r['ratio'], r['rel_diff'])
"
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
