#!/usr/bin/env bash
# Session 53's device calls (carry .whl).
#   cg ~150 s: which backend fails HF ModernBERT under CUDA graphs (cg_probe.py), Llama beside it
#   after ~400 s: the routes' GPU tests, ModernBERT both ways (new init), Llama --cudagraphs
#   cgfix ~300 s: the same after flashgen/kernels/lasting.py, with the GPU launch tests
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
cg)
  for w in flashgen inductor; do for fam in modernbert llama; do
    timeout 100 python3 -u benchmarks/raw/next_s53/cg_probe.py $w $fam > $OUT/cg_${w}_$fam.txt 2>&1
    stamp "cg $w $fam rc=$?"; grep -E " ok | FAILED|Error" $OUT/cg_${w}_$fam.txt | tail -4 | cut -c1-250
  done; done ;;
cgfix)  # ~300 s: after lasting.py: the launch GPU tests, the probe on flashgen, hf_padded --cudagraphs
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/kernels/test_launch_gpu.py > $OUT/gpu_launch.txt 2>&1
  stamp "launch gpu tests rc=$?"; tail -2 $OUT/gpu_launch.txt | cut -c1-300
  for fam in modernbert llama; do
    timeout 100 python3 -u benchmarks/raw/next_s53/cg_probe.py flashgen $fam > $OUT/cgfix_$fam.txt 2>&1
    stamp "cg flashgen $fam rc=$?"; grep -E " ok | FAILED|Error" $OUT/cgfix_$fam.txt | tail -3 | cut -c1-250
  done
  timeout 150 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
    --seq 2048 --width 1024 --heads 16 --pad right --cudagraphs --out $OUT/mbert_cg.json > $OUT/mbert_cg.txt 2>&1
  stamp "modernbert --cudagraphs rc=$?"; grep -E "^fwd|^check|^host" $OUT/mbert_cg.txt | cut -c1-200 ;;
auto)  # on an H200: issue 15's host bars and issue 13's TFLOP/s rows (next_s49 h200, ~210 s),
        # the routes' GPU tests and ModernBERT default (~150 s); elsewhere `after`
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average"
    timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_routes.py > $OUT/gpu_routes2.txt 2>&1
    stamp "routes gpu tests rc=$?"; tail -1 $OUT/gpu_routes2.txt | cut -c1-300
    timeout 140 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
      --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/mbert_after.json > $OUT/mbert_after.txt 2>&1
    stamp "modernbert rc=$?"; grep -E "^fwd|^check|^host" $OUT/mbert_after.txt | cut -c1-200
  else
    bash $0 after | grep -v "^card\|load average"
  fi ;;
last)  # on an H200: next_s49 h200 (~210 s) and the routes' GPU tests; elsewhere the GPU tests
        # of the session's changes (~90 s) and host_sleep.py once (~50 s)
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average"
    timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_routes.py > $OUT/gpu_routes3.txt 2>&1
    stamp "routes gpu tests rc=$?"; tail -1 $OUT/gpu_routes3.txt | cut -c1-300
  else
    timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
      tests/kernels/test_attn_mask.py tests/kernels/test_launch_gpu.py tests/compile/test_backend_gpu.py \
      > $OUT/gpu_last.txt 2>&1
    stamp "gpu tests rc=$?"; tail -1 $OUT/gpu_last.txt | cut -c1-300
    PYTHONPATH=/tmp/site:$PWD SHAPES=1 ROUNDS=2 timeout 100 python3 -u benchmarks/raw/next_s52/host_sleep.py $OUT/hs_last.json 2>&1 | grep -v -i "warn\|transformers\]" | grep -E "prim|sdpa|composite|round"
    stamp "host_sleep"
  fi ;;
after)  # ~400 s: the routes' GPU tests, ModernBERT (initializer 0.05) both ways, Llama under graphs
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_routes.py > $OUT/gpu_routes2.txt 2>&1
  stamp "routes gpu tests rc=$?"; tail -1 $OUT/gpu_routes2.txt | cut -c1-300
  for cg in "" "--cudagraphs"; do
    timeout 140 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
      --seq 2048 --width 1024 --heads 16 --pad right $cg --out $OUT/mbert_after$cg.json > $OUT/mbert_after$cg.txt 2>&1
    stamp "modernbert $cg rc=$?"; grep -E "^fwd|^check|^host" $OUT/mbert_after$cg.txt | cut -c1-200
  done
  timeout 140 python3 -u benchmarks/hf_padded.py --family llama --cudagraphs --out $OUT/llama_cg.json > $OUT/llama_cg.txt 2>&1
  stamp "llama --cudagraphs rc=$?"; grep -E "^fwd|^check|^host" $OUT/llama_cg.txt | cut -c1-200 ;;
esac
done
