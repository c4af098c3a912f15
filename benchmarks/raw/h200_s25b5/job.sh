#!/usr/bin/env bash
# Session 25, batch B5 (issue 14), about 150 s: two dQ staging buffers a chunk (dq_bufs=2)
# against the shipped configs, float64 checks first (dq_bufs_ab.py).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s25b5/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 benchmarks/raw/h200_s25b5/dq_bufs_ab.py $W/dq_bufs_ab.json 3 110 > $W/dq_bufs_ab.txt 2>&1
stamp "ab rc=$?"; grep -v "^{" $W/dq_bufs_ab.txt | tail -8 | cut -c1-300; python3 -c "
import json; d=json.load(open('$W/dq_bufs_ab.json'))
for r in d['rows']: print(r['shape'], r['causal'], {k: round(v,4) for k,v in r['median'].items()}, r['ratio'], r['rel_diff'])
"
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
