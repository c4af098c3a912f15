#!/usr/bin/env bash
# Session 14, batch B1 (issues 16, 15): the block-sparse walk's GPU tests (forward and both
# backward kernels) and its speed against the tile-by-tile default, alternated; the dropout and
# softcap forwards under ncu (what limits them); the launch-bound backward under cProfile.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_attn_mask.py tests/kernels/test_dropout.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -15 $W/pytest_gpu.txt | cut -c1-300
for r in 1 2; do
  timeout 120 python3 benchmarks/masks.py --only attn_mask_bool_b1nn --budget 100 --out $W/masks_default_$r.csv > $W/masks_default_$r.txt 2>&1
  stamp "masks default $r rc=$?"; grep -E "check|name=|Error" $W/masks_default_$r.txt | cut -c1-330
  FLASHGEN_BLOCK_SPARSE=1 timeout 120 python3 benchmarks/masks.py --only attn_mask_bool_b1nn --budget 100 --out $W/masks_sparse_$r.csv > $W/masks_sparse_$r.txt 2>&1
  stamp "masks sparse $r rc=$?"; grep -E "check|name=|Error" $W/masks_sparse_$r.txt | cut -c1-330
done
FLASHGEN_BLOCK_SPARSE=1 timeout 100 python3 benchmarks/mask_kernels.py --only attn_mask_bool_b1nn > $W/mask_kernels_sparse.txt 2>&1
stamp "mask_kernels sparse rc=$?"; cut -c1-200 $W/mask_kernels_sparse.txt | tail -25
timeout 100 python3 benchmarks/mask_kernels.py --only attn_mask_bool_b1nn > $W/mask_kernels_default.txt 2>&1
stamp "mask_kernels default rc=$?"; cut -c1-200 $W/mask_kernels_default.txt | tail -25
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for kind in drop softcap plain; do
  timeout 120 $NCU --clock-control none --kernel-name regex:attn_fwd --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats --section Occupancy --section LaunchStats \
    python3 benchmarks/raw/h200_s14b1/ncu_attn.py $kind > $W/ncu_$kind.txt 2>&1
  stamp "ncu $kind rc=$?"; grep -v "^==PROF==" $W/ncu_$kind.txt | grep -iE "attn_fwd|Duration|Throughput|Stall|Issued|Eligible|Registers|Shared Memory|Bank|Occupancy|Warp Cycles|Executed Ipc|One or More" | head -40 | cut -c1-200
done
timeout 90 python3 benchmarks/host_profile.py --backward --calls 3000 --top 40 > $W/host_profile_bwd.txt 2>&1
stamp "host_profile rc=$?"; head -60 $W/host_profile_bwd.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
