#!/usr/bin/env bash
# Prepared in session 17 for the next session (about 330 s): the whole GPU suite on the final
# tree (session 17's last commits after B6 changed tests/kernels/test_hopper.py's helpers and
# docs only, and ran on the CPU), then issue 15's host time of a launch-bound call (last read in
# session 14 B8 / 16 B3-B4), SDPA alternating. Run as FLASHGEN_COMMIT=<sha> bash
# benchmarks/raw/h200_s18b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -15 | cut -c1-300
for shape in 1,1,128,128 1,1,128,64; do
  timeout 50 python3 benchmarks/host_time.py --label next --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; tail -10 $W/host_${shape//,/x}.txt
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
