#!/usr/bin/env bash
# Session 14, batch B3 (issues 16, all): the whole GPU suite with the block-sparse walk on by
# default; the Hopper forward of a boolean key-padding mask against the same padding as
# key_lengths under ncu (why the mask costs ~40% more), with source counters.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -8 $W/pytest_gpu.txt | cut -c1-300
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for kind in mask lengths; do
  timeout 150 $NCU --clock-control none --kernel-name regex:attn_fwd --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section InstructionStats --section LaunchStats --section SourceCounters \
    python3 benchmarks/raw/h200_s14b3/ncu_pad.py $kind > $W/ncu_$kind.txt 2>&1
  stamp "ncu $kind rc=$?"; grep -v "^==PROF==" $W/ncu_$kind.txt | grep -iE "Duration|Issued Instructions  |Registers Per|Eligible Warps|Warp Cycles Per Issued|Stall|Long Scoreboard|Global Load|Branch Instructions  " | head -24 | cut -c1-200
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
