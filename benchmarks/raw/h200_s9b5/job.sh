#!/usr/bin/env bash
# Session 9, batch B5: the benchmark scripts moved onto flashgen/bench/scripts.py run on the
# H200 (B3 cut gpu_check.py and gpu_check_bwd.py at 100 s / 60 s): forward and backward checks
# with timings, and hopper_probe.py's quick bench.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
timeout 200 python3 benchmarks/gpu_check.py "$OUT/gpu_check_fwd.json" > "$OUT/gpu_check_fwd.txt" 2>&1
stamp "gpu_check rc=$?"; grep -v "Warning\|warn\|run_backward" "$OUT/gpu_check_fwd.txt" | tail -12
timeout 130 python3 benchmarks/gpu_check_bwd.py --timing-only "$OUT/gpu_check_bwd.json" > "$OUT/gpu_check_bwd.txt" 2>&1
stamp "gpu_check_bwd rc=$?"; grep -v "Warning\|warn\|run_backward" "$OUT/gpu_check_bwd.txt" | tail -12
timeout 60 python3 benchmarks/hopper_probe.py bench quick > "$OUT/hopper_probe_quick.txt" 2>&1
stamp "hopper_probe quick rc=$?"; tail -6 "$OUT/hopper_probe_quick.txt"
