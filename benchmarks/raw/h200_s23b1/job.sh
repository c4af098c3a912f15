#!/usr/bin/env bash
# Session 23 B1, about 520 s (issues 14, 16): the GPU tests session 22's review changed without a
# GPU run and the new `rotate` configs (tests/kernels/test_hopper_bwd.py, test_hopper.py), then
# the Hopper backward with and without `rotate` (the key blocks of a head start their walks over
# the query blocks spread out instead of all at block 0, where they add dQ partials into the
# same rows at once) on the anchor grid beside the split kind and cuDNN in one process (causal
# rows render the same kernel for both: their spread is the run's noise), then the
# non-causal backward under Nsight Compute with each.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s23b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
  tests/kernels/test_hopper.py > $W/pytest_hopper.txt 2>&1
stamp "pytest hopper rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper.txt | tail -8 | cut -c1-600
S=2,2,1,168,1,0,0,1,64,1,1,0
timeout 230 python3 benchmarks/hopper_bwd.py --out $W --budget 200 --check-timeout 80 \
  --configs 64:$S,0 64:$S,1 128:$S,0 128:$S,1 > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|causal=|summary|Error" $W/hopper_bwd.txt | cut -c1-700
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
