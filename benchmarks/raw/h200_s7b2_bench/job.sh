# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B2: HF Llama training, WHOLE model compiled, 1 x 16384 tokens (the bar's
# missing figure), eager / Inductor / flashgen as three processes sharing the GPU through one lock
# (compile together, time alone); then, with the seconds left, `flashgen bench` hd128 GQA 16/4
# causal (JSON rewritten after every case, so a cut run keeps what it measured).
# Its commands are benchmarks/llama_bench_job.sh's with these parameters (this file held the
# same commands inline when the batch ran; `git log -p -- benchmarks/raw/h200_s7b2_bench/job.sh`).
FLASHGEN_COMMIT=64eaeeb SHAPES=1x16384:16k STEPS=5 LIMIT=76 VERSIONS=1 TAIL=4 END=84 MIN_LEFT=12 \
  SEQS=16384,4096,1024 bash benchmarks/llama_bench_job.sh
