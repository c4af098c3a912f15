#!/usr/bin/env bash
# Batch B3 (session 7) of issue 13: the library path (flashgen.kernels.fwd.forward, the
# library's own family choice and the shipped tuning_db/hopper/nvidia-h200.json) over the
# 12-shape grid and GQA 32/8, side by side with cuDNN and FA2 (benchmarks/hopper_probe.py
# bench, do_bench medians, 3 rounds, rotated order), after each probed config's output was
# checked against cuDNN's at the timed shape.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
# One probed config per head dim beside the library path: hd128 ping-pong persistent (static), the
# candidate for the non-causal buckets still on plain or non-ping-pong grids (1k, 16k); hd64
# three consumers, dynamic (hd64 1k causal did not gain from the dynamic grid of 128-row items).
export PROBE_CFGS=${PROBE_CFGS:-'{"128": [[128,128,2,4,168,2,true,true]], "64": [[192,64,3,4,128,3,false,true,true]]}'}
PROBE_FAMILIES=auto PROBE_WORKERS=12 python3 benchmarks/hopper_probe.py warm > "$OUT/warm.txt" 2>&1
rc=$?; echo "[$(( $(date +%s) - t0 )) s] warm rc=$rc"
PROBE_FAMILIES=auto PROBE_ROUNDS=3 python3 benchmarks/hopper_probe.py bench
echo "[$(( $(date +%s) - t0 )) s] done"
