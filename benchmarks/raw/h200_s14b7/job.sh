#!/usr/bin/env bash
# Session 14, batch B7 (issues 13, 14): flashgen's own kernels (forced) against cuDNN over the
# issue-14 grid with GQA, forward alone and forward+backward, fast and deterministic backward.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
FLASHGEN_IMPL=flashgen timeout 225 python3 benchmarks/bwd_grid.py --out $W --budget 195 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -6
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; cat $W/bwd_grid_table.md | tail -26
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
