#!/usr/bin/env bash
# Session 13, batch B3 (issue 16): the measured rows for windows and mask tensors
# (tile_defaults.csv's variant rows, dq_tiles' SM90_WINDOW_DQ) through masks.py, with its
# float64 checks; the GPU tests of the touched kernels; masked_tiles.py's additive key-padding
# row (the mask forward row applies to it, unmeasured); the mask forward under ncu.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
V=window_causal_1024,window_causal_256,window_2sided_512,attn_mask_bias_causal,attn_mask_bool_b1nn,attn_mask_bool_pad
timeout 200 python3 benchmarks/masks.py --only $V --budget 180 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error" $W/masks.txt | cut -c1-330
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py tests/kernels/test_window.py tests/kernels/test_bias_grad.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -3 $W/pytest_gpu.txt
timeout 100 python3 benchmarks/masked_tiles.py --only add_b11n --budget 80 --workers 14 --out $W > $W/masked_tiles.txt 2>&1
stamp "masked tiles rc=$?"; grep -v Warn $W/masked_tiles.txt | cut -c1-300
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for kind in bias bool; do
  timeout 120 $NCU --clock-control none --kernel-name regex:attn_fwd --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 benchmarks/raw/h200_s13b3/ncu_mask.py $kind > $W/ncu_$kind.txt 2>&1
  stamp "ncu $kind rc=$?"; grep -v "^==PROF==" $W/ncu_$kind.txt | grep -iE "Duration|Throughput|Stall|Issued|Eligible|Registers|Shared Memory|Occupancy|Warp Cycles|Block Limit|One or More" | head -40
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
