#!/usr/bin/env bash
# Session 11, batch B6 (issues 15, 18): cuDNN's backward on flashgen's forward (33ed30f).
# 1. the GPU suite; 2. the grid through the op against every SDPA backend (vendor_grid.py:
#    forward+backward now runs flashgen's forward with cuDNN's backward where the records say
#    so); 3. HF Llama training at 1 x 16384 tokens, flashgen and eager (Inductor ran 59-60k
#    tokens/s there in S10 B1/B5, far below eager; not re-run to save device time).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED" $W/pytest_gpu.txt | cut -c1-250 | tail -15
timeout 120 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor grid rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "choice|worst" | cut -c1-200
LOCK=/tmp/gpu.lock; cd examples
for b in eager flashgen; do
  TORCHINDUCTOR_COMPILE_THREADS=6 timeout 150 python3 train_hf_llama.py --compile-scope model --shapes 1x16384 --steps 8 --warmup 2 \
      --backends $b --gpu-lock $LOCK --json $W/llama_model_16k_$b.json > $W/llama_model_16k_$b.log 2>&1 &
done; wait
stamp "llama 16k done"
python3 ../benchmarks/train_merge.py $W/llama_model_16k_{eager,flashgen}.json --json $W/train_hf_llama_model_16k.json | tail -5
cd ..; tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
