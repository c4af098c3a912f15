#!/usr/bin/env bash
# Session 18 B8: the Llama block's kernels per step under Inductor and under flashgen's backend
# (profile_block.py; issue 15: B4 and B7 read flashgen's step 0.98-0.99x paired with both running
# cuDNN's attention). Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b8/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 benchmarks/raw/h200_s18b8/profile_block.py > $W/profile_block.txt 2>&1
stamp "profile rc=$?"; grep -v -E "Warn|warn" $W/profile_block.txt | head -60 | cut -c1-170
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
