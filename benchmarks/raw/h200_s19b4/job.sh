#!/usr/bin/env bash
# Session 19 B4: the whole GPU suite with the split backward's Hopper dK/dV kernel
# (hopper_bwd.DKDV_AUTO: head dim 128, not causal, >= 1k keys), then issues 13/14's grid as
# B2 ran it (flashgen's own kernels against cuDNN, fast and deterministic).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s19b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -12 | cut -c1-300
FLASHGEN_IMPL=flashgen timeout 225 python3 benchmarks/bwd_grid.py --out $W --budget 195 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -2 | cut -c1-400
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -26 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
