# tree: /work/wt-host
# limit: 60
# host (issue 15), B4 (only if device time is left): the GPU tests of the paths this work
# changed (never run on a GPU yet: direct launches, CUDA-graph capture with the lse scratch
# buffer, SDPA routing), then host time per call with the backward-only case and layer.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
el "gpu tests"
timeout 28 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_launch_gpu.py \
  tests/runtime/test_vendor.py > $OUT/gputests.txt 2>&1; el "rc=$?"
left=$(( 56 - $(date +%s) + T0 )); [ $left -lt 3 ] && left=3
el "host_time final2, ${left} s"
timeout $left python3 benchmarks/host_time.py --label final2 --commit 4327afd --rounds 15 \
  --out $OUT/host_final2.json > $OUT/host_final2.txt 2>&1; el "rc=$?"
tail -n 25 $OUT/gputests.txt $OUT/host_final2.txt
