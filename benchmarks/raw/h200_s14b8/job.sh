#!/usr/bin/env bash
# Session 14, batch B8 (issue 15): host time of a launch-bound call, SDPA alternating.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
for shape in 1,1,128,128 1,1,128,64; do
  timeout 50 python3 benchmarks/host_time.py --label s14b8 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; tail -10 $W/host_${shape//,/x}.txt
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
