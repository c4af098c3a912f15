# tree: /work/wt-host
# limit: 60
# host (issue 15), B3: host time per call of this tree (same script as B2), the Llama SDPA
# block (flashgen backend vs Inductor, alternating rounds), then the 9 grid rows B2's cut left.
set -u
T0=$(date +%s); el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/gpu.txt 2>&1
el "host_time final"
timeout 19 python3 benchmarks/host_time.py --label final --commit 4589a13 --rounds 15 \
  --out $OUT/host_final.json > $OUT/host_final.txt 2>&1; el "rc=$?"
el "llama_block"
timeout 25 python3 benchmarks/llama_block.py --rounds 5 --rep 20 --out $OUT/llama_block.json \
  > $OUT/llama_block.txt 2>&1; el "rc=$?"
left=$(( 56 - $(date +%s) + T0 )); [ $left -lt 3 ] && left=3
el "vendor_grid rest, ${left} s"
timeout $left python3 benchmarks/vendor_grid.py \
  --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $OUT/grid_rest.json \
  --shapes "4,32,32,4096,64,1;1,32,32,16384,64;16,32,8,1024,128;4,32,8,4096,128;1,32,8,16384,128" \
  > $OUT/grid_rest.txt 2>&1; el "rc=$?"
tail -n 30 $OUT/host_final.txt $OUT/llama_block.txt $OUT/grid_rest.txt
