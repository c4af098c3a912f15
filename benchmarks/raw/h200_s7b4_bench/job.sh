# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B4: (1) the noise floor of B3's loss check: HF Llama whole model 1 x 16384
# run EAGERLY twice (same seed, same batches, 2 + 8 steps as in B3; no timing needed), to see how far
# two eager runs drift apart at the step-9 loss spike where flashgen's gap was 0.078; (2) with the
# seconds left, `flashgen bench` hd128 GQA 16/4 causal for the plot (JSON rewritten per case).
# Its commands are benchmarks/llama_bench_job.sh's with these parameters (this file held the
# same commands inline when the batch ran; `git log -p -- benchmarks/raw/h200_s7b4_bench/job.sh`).
FLASHGEN_COMMIT=39c1c21 BACKENDS=eager RUNS="a b" LIMIT=40 LOCK=0 TAIL=0 MERGE=0 COMPARE=1 \
  bash benchmarks/llama_bench_job.sh
