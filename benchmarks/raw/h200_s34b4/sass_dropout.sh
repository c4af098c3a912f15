#!/usr/bin/env bash
# Session 34 B4 static side (CPU): the Hopper forward with dropout (forced-only), the configs
# the run time launches at 4k (head dims 128 and 64, causal both ways), Triton 3.6 ptxas. Run
# from the repository root as
#   TRITON36=/tmp/t36 bash benchmarks/raw/h200_s34b4/sass_dropout.sh > benchmarks/raw/h200_s34b4/sass_dropout.txt
for d in 128 64; do
  for causal in "" --causal; do
    env -u TRITON_INTERPRET PYTHONPATH=${TRITON36:-/tmp/t36}:. .venv/bin/python benchmarks/kernel_sass.py \
      --family hopper --seq 4096 --head-dim $d $causal --dropout 2>&1 | grep "^attn_fwd_ws"
  done
done
