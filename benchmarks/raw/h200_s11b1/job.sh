#!/usr/bin/env bash
# Session 11, batch B1 (issues 13, 14, 15): current figures for bars not measured in session 10.
# 1. bwd_grid.py: forward alone and forward+backward of flashgen's kernels (forced) against
#    cuDNN over the issue-14 grid incl. GQA, default and deterministic backward (issue 13's GQA
#    forward bar; issue 14's bars). 2. vendor_grid.py: the op with its records and the host rule
#    against every SDPA backend (issue 15's grid bar, after the host rule). 3. host time.
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/work; mkdir -p $W
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
FLASHGEN_IMPL=flashgen timeout 230 python3 benchmarks/bwd_grid.py --out $W --budget 190 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -v Warn $W/bwd_grid.txt | tail -12
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; cat $W/bwd_grid_table.md | tail -30
timeout 200 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor grid rc=$?"; grep -v Warn $W/vendor_grid.txt | tail -24
for shape in 1,1,128,128 1,1,128,64; do
  timeout 45 python3 benchmarks/host_time.py --label s11b1 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; tail -10 $W/host_${shape//,/x}.txt
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
