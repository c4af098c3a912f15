#!/usr/bin/env bash
# Session 34 B5 static side (CPU): the Hopper forward, plain and with ALiBi, head dim 128's 4k
# record as the run time launches it (causal both ways), Triton 3.6 ptxas. Run from the
# repository root, TREE naming the flashgen tree to compile (default .): b9b83f0's (before,
# `git worktree add /tmp/wt_old b9b83f0`), 727a9e0's (B5's change) and this one (PINGPONG_OFF
# also drops the non-causal record's ping-pong for ALiBi):
#   TRITON36=/tmp/t36 TREE=/tmp/wt_old bash benchmarks/raw/h200_s34b5/sass_alibi.sh
for extra in "" --alibi; do
  for causal in "" --causal; do
    env -u TRITON_INTERPRET PYTHONPATH=${TRITON36:-/tmp/t36}:${TREE:-.} .venv/bin/python benchmarks/kernel_sass.py \
      --family hopper --seq 4096 --head-dim 128 $causal $extra 2>&1 | grep "^attn_fwd_ws"
  done
done
