#!/usr/bin/env bash
# Session 13, batch B4 (issues 16, 18): the whole GPU suite on this tree (mask tensors' launch
# order, the window and mask-tensor tile rows), then HF Llama training at 2x4k and 1x16k tokens,
# eager, Inductor and flashgen, one process each sharing the GPU through a lock (compiled
# together, timed alone): benchmarks/llama_bench_job.sh without its bench.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | cut -c1-250 | tail -15
export TORCHINDUCTOR_COMPILE_THREADS=4
OUT=$W SHAPES="2x4096:4k 1x16384:16k" LIMIT=280 END=0 TAIL=4 bash benchmarks/llama_bench_job.sh
stamp "llama rc=$?"
python3 benchmarks/loss_spread.py $W/llama_model_16k_eager.json=eager $W/llama_model_16k_inductor.json=inductor $W/llama_model_16k_flashgen.json=flashgen 2>&1 | tee $W/loss_spread_16k.txt
python3 benchmarks/loss_spread.py $W/llama_model_4k_eager.json=eager $W/llama_model_4k_inductor.json=inductor $W/llama_model_4k_flashgen.json=flashgen 2>&1 | tee $W/loss_spread_4k.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
