# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B3: HF Llama training, WHOLE model compiled, 2 x 4096 and 1 x 16384 tokens
# on the same package code as B2's 16k run (a second 16k reading, 8 timed steps), eager / Inductor /
# flashgen: six processes sharing the GPU through one lock (compile together, time alone); then,
# only if >= 30 s are left, `flashgen bench` hd128 GQA 16/4 causal (JSON rewritten per case).
# Its commands are benchmarks/llama_bench_job.sh's with these parameters (this file held the
# same commands inline when the batch ran; `git log -p -- benchmarks/raw/h200_s7b3_bench/job.sh`).
FLASHGEN_COMMIT=5d5cb81 TORCHINDUCTOR_COMPILE_THREADS=8 SHAPES="1x16384:16k 2x4096:4k" \
  bash benchmarks/llama_bench_job.sh
