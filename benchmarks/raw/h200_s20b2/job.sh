#!/usr/bin/env bash
# Prepared in session 19 for the next session, about 380 s: every masks.py row again (issue 16;
# last full read session 18 B3, the key-padding rows session 19 B1 with two rounds), and the
# launch-bound host times (issue 15; the plain backward path now asks hopper_bwd.AUTO by key
# length). Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s20/job_b.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 300 python3 benchmarks/masks.py --budget 280 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|failed" $W/masks.txt | cut -c1-330
for shape in 1,1,128,128 1,1,128,64; do
  timeout 50 python3 benchmarks/host_time.py --label s20 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; grep -E "fwd|bwd" $W/host_${shape//,/x}.txt | head -6
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
