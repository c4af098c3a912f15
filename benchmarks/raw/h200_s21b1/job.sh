#!/usr/bin/env bash
# Prepared in session 20 (its device time spent) for the next session, about 520 s (issues 14,
# 16): the Hopper backward's GPU tests (dq_turns, the persistent stats_smem config, and the
# renderings with lengths and with key-padding masks are new, never run on a GPU), then benchmarks/hopper_bwd.py over the anchor grid: head dim 64's shipped config
# against it with dq_turns (the consumers take the dQ products in turns), head dim 128's shipped
# config for reference, the split kind and cuDNN beside them in one process. Ship dq_turns in
# hopper_bwd.CONFIGS[64] only if it wins there, then re-read the grid (bwd_grid.py).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s21/job_a.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-400
timeout 260 python3 benchmarks/hopper_bwd.py --out $W --budget 200 --check-timeout 70 --rep 20 --configs \
  128:2,2,1,168,1,0,0,1,1,1 64:2,2,1,168,1,0,0,1,1,1 64:2,2,1,168,1,0,0,1,1,1,1 > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks:|FAILED|causal=|summary" $W/hopper_bwd.txt | cut -c1-700
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
