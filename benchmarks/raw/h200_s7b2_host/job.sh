# tree: /work/wt-host
# limit: 60
# host (issue 15), B2: host time per call of this tree and of main (hostbase/) on this H200,
# then the benchmark grid: the op (shipped records) vs each SDPA backend.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
el "host_time after"
timeout 24 python3 benchmarks/host_time.py --label after --commit HOSTSHA --rounds 15 \
  --out $OUT/host_after.json > $OUT/host_after.txt 2>&1; el "rc=$?"
el "vendor_grid"
timeout 22 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient \
  --rounds 2 --rep 10 --out $OUT/grid.json > $OUT/grid.txt 2>&1; el "rc=$?"
el "host_time before (main)"
(cd hostbase && PYTHONPATH=/tmp/site:$PWD timeout 12 python3 ../benchmarks/host_time.py \
  --label before --commit 4f712ff --rounds 11 --out $OUT/host_before.json) > $OUT/host_before.txt 2>&1; el "rc=$?"
tail -n 30 $OUT/host_after.txt $OUT/host_before.txt $OUT/grid.txt
