#!/usr/bin/env bash
# Session 20, batch B4 (issue 14): the Hopper backward with its K/V/dS wgmma descriptors rebuilt
# at use (no spills at head dim 128 under Triton 3.6's ptxas, from 316 bytes non-causal and
# 528 causal) and the stats_smem knob (lse/delta staged in shared memory): the GPU tests
# (float64, both new configs), then benchmarks/hopper_bwd.py on the anchor grid: the split
# kind, the shipped config and it with stats_smem, against cuDNN, in one process.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_hopper_bwd.py > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-400
timeout 260 python3 benchmarks/hopper_bwd.py --out $W --budget 200 --check-timeout 70 --rep 20 --configs \
  128:2,2,1,168,1,0,0,1,1 128:2,2,1,168,1,0,0,1,1,1 \
  64:2,2,1,168,1,0,0,1,1 64:2,2,1,168,1,0,0,1,1,1 > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks:|FAILED|causal=|summary" $W/hopper_bwd.txt | cut -c1-700
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
