#!/usr/bin/env bash
# Batch B4 (session 7) of issue 13: B3 read hd128 1k causal through the library path at 318,
# 428 and 340 TFLOP/s in its three rounds (cuDNN 408-422; the same config alone read 428-430
# in B2), and cuDNN 504-605 at the first shape. Again, after the GPU was kept busy for 3 s,
# with 5 rounds, the weak shapes only, and per column do_bench's 10/50/90% quantiles and the
# wall time per back-to-back call (whether readings are bimodal, whether the host keeps up).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
export PROBE_CFGS='{"128": [[128,128,2,4,168,2,true,true,true], [128,128,2,4,168,2,false,true,true]], "64": []}'
export PROBE_SHAPES=128:1024:1:0,128:1024:1:1,128:1024:0:0,64:1024:1:0,128:16384:0:0
PROBE_FAMILIES=auto PROBE_WORKERS=12 python3 benchmarks/hopper_probe.py warm > "$OUT/warm.txt" 2>&1
rc=$?; echo "[$(( $(date +%s) - t0 )) s] warm rc=$rc"
PROBE_SPIN_S=3 PROBE_SPREAD=1 PROBE_FAMILIES=auto PROBE_ROUNDS=5 python3 benchmarks/hopper_probe.py bench
echo "[$(( $(date +%s) - t0 )) s] done"
