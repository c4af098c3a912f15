#!/usr/bin/env bash
# Session 52's work for the next device time (either card; its name is printed first).
# Carrying .whl (and old_tree/ for `ab`, see ab.sh).
#   gpu ~120 s: the new GPU tests (sinks passes, padded latent values) and the mask/compile suite
#   mbert ~300 s: HF ModernBERT (session 52: host-bound forward) by default and with
#        --cudagraphs (both backends' graphs as CUDA graphs), each with its host time a forward
#   deepseek ~150 s: HF DeepSeek-V3 eager (latent attention, values padded) against Inductor
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
gpu)
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_sinks_kernel.py \
    tests/runtime/test_value_dim.py tests/kernels/test_attn_mask.py tests/compile > $OUT/gpu.txt 2>&1
  stamp "gpu tests rc=$?"; tail -2 $OUT/gpu.txt | cut -c1-300 ;;
mbert)
  for cg in "" "--cudagraphs"; do
    timeout 140 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
      --seq 2048 --width 1024 --heads 16 --pad right $cg --out $OUT/mbert$cg.json > $OUT/mbert$cg.txt 2>&1
    stamp "modernbert $cg rc=$?"; grep -E "^fwd|^check|^host" $OUT/mbert$cg.txt | cut -c1-200
  done ;;
deepseek)
  timeout 150 python3 -u benchmarks/hf_padded.py --family deepseek_v3 --attn eager --batch 4 \
    --seq 2048 --width 2048 --heads 16 --pad right --out $OUT/deepseek.json > $OUT/deepseek.txt 2>&1
  stamp "deepseek rc=$?"; grep -E "^fwd|^check|^host|values of" $OUT/deepseek.txt | cut -c1-200 ;;
esac
done
