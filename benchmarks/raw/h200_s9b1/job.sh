#!/usr/bin/env bash
# Session 9, batch B1 (issues 13 and 15): the Hopper forward's launch plan (direct launch after
# the first call) on the H200. GPU tests of the launch paths and the Hopper family, then the
# library path over the 12-shape grid + GQA beside cuDNN and FA2 (hopper_probe.py bench, 5
# rounds, wall time per call), then host time per call for the portable (1x1x128x64) and the
# Hopper (1x1x128x128) forward.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 -rfE \
  tests/kernels/test_launch_gpu.py tests/kernels/test_hopper.py > "$OUT/gpu_tests.txt" 2>&1
stamp "gpu tests rc=$?"; tail -5 "$OUT/gpu_tests.txt"
export PROBE_CFGS='{"128": [[128,128,2,4,168,2,true,true]], "64": [[192,64,3,4,128,3,false,true,true]]}'
PROBE_FAMILIES=auto PROBE_WORKERS=12 timeout 90 python3 benchmarks/hopper_probe.py warm > "$OUT/warm.txt" 2>&1
stamp "warm rc=$?"
PROBE_SPIN_S=3 PROBE_SPREAD=1 PROBE_FAMILIES=auto PROBE_ROUNDS=5 timeout 160 python3 benchmarks/hopper_probe.py bench
stamp "bench rc=$?"
timeout 60 python3 benchmarks/host_time.py --label s9b1-portable --rounds 11 --out "$OUT/host_portable.json" | tail -20
stamp "host portable rc=$?"
timeout 60 python3 benchmarks/host_time.py --label s9b1-hopper --shape 1,1,128,128 --rounds 11 --out "$OUT/host_hopper.json" | tail -20
stamp "host hopper rc=$?"
