#!/usr/bin/env bash
# Batch B2 (session 7) of issue 13: the dynamic persistent grid (HopperConfig.dynamic) on the
# H200. Correctness first (the family's float64 GPU tests, dynamic grids launch after launch
# among them; every probed config's output against cuDNN's at each timed shape), then TFLOP/s
# side by side with cuDNN and FA2 (benchmarks/hopper_probe.py bench, do_bench medians, 2 rounds, rotated order).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
# hd128: the shipped 4k/16k config (plain grid; persistent static at 1k), dynamic, ping-pong
# dynamic; hd64: the shipped config (persistent static), dynamic, three consumers dynamic.
export PROBE_CFGS='{"128": [[128,128,2,4,168,2,false,false], [128,128,2,4,168,2,false,true], [128,128,2,4,168,2,false,true,true], [128,128,2,4,168,2,true,true,true]], "64": [[128,128,3,4,168,2,false,true], [128,128,3,4,168,2,false,true,true], [192,64,3,4,128,3,false,true,true]]}'
export PROBE_SHAPES=128:1024:0:0,128:4096:0:0,128:1024:1:0,128:4096:1:0,128:16384:1:0,64:1024:1:0,64:4096:1:0,64:16384:1:0,128:1024:1:1,128:4096:1:1,128:16384:1:1
PROBE_FAMILIES=auto PROBE_WORKERS=8 python3 benchmarks/hopper_probe.py warm > "$OUT/warm.txt" 2>&1 &
timeout -k 2 60 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_hopper.py > "$OUT/tests.txt" 2>&1 &
wait
echo "[$(( $(date +%s) - t0 )) s] warm + tests done"; tail -3 "$OUT/tests.txt"
PROBE_FAMILIES=auto PROBE_ROUNDS=2 python3 benchmarks/hopper_probe.py bench
echo "[$(( $(date +%s) - t0 )) s] done"
