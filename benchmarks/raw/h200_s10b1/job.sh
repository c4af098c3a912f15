#!/usr/bin/env bash
# Session 10, batch B1: the GPU suite on main after session 9's CPU-only launch edits; where the
# host time of the Hopper forward goes (host_profile.py, cProfile, hd128 vs hd64); what a ViT
# step runs under Inductor and flashgen (step_profile.py, 197 tokens); HF Llama 16k training,
# with a second eager run for the loss check's noise floor (issue 18).
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE tests > "$OUT/gpu_tests.txt" 2>&1
stamp "gpu tests rc=$?"; tail -8 "$OUT/gpu_tests.txt"
for shape in 1,1,128,128 1,1,128,64; do
  timeout 40 python3 benchmarks/host_profile.py --shape $shape --calls 4000 --top 28 > "$OUT/host_profile_${shape//,/x}.txt" 2>&1
  stamp "host_profile $shape rc=$?"
done
timeout 150 python3 benchmarks/step_profile.py --backends inductor,flashgen,inductor,flashgen --steps 10 --top 22 > "$OUT/vit_profile.txt" 2>&1
stamp "vit profile rc=$?"; grep "===" "$OUT/vit_profile.txt"
LOCK=/tmp/gpu.lock; cd examples
for b in eager eager inductor flashgen; do
  n=$b; [ -e "$OUT/llama_model_16k_$b.json" ] && n=${b}_b
  TORCHINDUCTOR_COMPILE_THREADS=4 timeout 170 python3 train_hf_llama.py --compile-scope model --shapes 1x16384 --steps 8 --warmup 2 \
      --backends $b --gpu-lock $LOCK --json $OUT/llama_model_16k_$n.json > $OUT/llama_model_16k_$n.log 2>&1 &
  sleep 1; touch "$OUT/llama_model_16k_$n.json"
done; wait
stamp "llama done"
python3 ../benchmarks/train_merge.py $OUT/llama_model_16k_{eager,inductor,flashgen}.json --json $OUT/train_hf_llama_model.json | tail -6
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
a, b, f = (json.load(open(f"{o}/llama_model_16k_{n}.json")) for n in ("eager", "eager_b", "flashgen"))
def losses(d):
    rows = d.get("rows", d if isinstance(d, list) else [])
    return rows[0]["losses"]
la, lb, lf = losses(a), losses(b), losses(f)
print("eager-eager", [round(abs(x - y), 4) for x, y in zip(la, lb)])
print("flashgen-eager", [round(abs(x - y), 4) for x, y in zip(la, lf)])
print("flashgen-eager_b", [round(abs(x - y), 4) for x, y in zip(lb, lf)])
PY
stamp end
