#!/usr/bin/env bash
# Session 37 B5: the forward+backward host time (issue 15's 1.5x bar read 1.562x in B1).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s37b5/job.sh      (carrying .whl)
# host_time.py again on this machine, then host_prof.py (cProfile of the fwd_bwd, fwd_grad and
# bwd cases with flashgen's kernels forced, and SDPA's fwd_bwd).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 120 python3 benchmarks/host_time.py --rounds 5 --out $OUT/host_time.json > $OUT/host_time.txt 2>&1
stamp "host_time rc=$?"; grep -v -i warn $OUT/host_time.txt | head -8 | cut -c1-200
timeout 200 python3 benchmarks/raw/h200_s37b5/host_prof.py 2000 > $OUT/host_prof.txt 2>&1
stamp "host_prof rc=$?"; grep "us/call" $OUT/host_prof.txt
