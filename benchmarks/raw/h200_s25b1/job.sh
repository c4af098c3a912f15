#!/usr/bin/env bash
# Session 25, batch B1 (issues 14), about 420 s: (1) the Hopper families' GPU tests on the tree
# whose templates share the dynamic grid's item hand-off (_items.jinja; rendered code changed
# only in docstrings); (2) the backward kinds at 1k and 4k keys through the library path
# (bwd_grid.py modes fast / hopper / split, four alternating rounds): which kind each (head dim,
# causal) should default to now that the hopper kind's shipped configs moved (session 24);
# (3) cuDNN's kernels of one forward+backward call beside flashgen's (torch.profiler).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s25b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py tests/kernels/test_hopper_bwd.py -p no:randomly > $W/gpu_hopper_tests.txt 2>&1
stamp "hopper gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_hopper_tests.txt | tail -8 | cut -c1-400
FLASHGEN_IMPL=flashgen timeout 220 python3 benchmarks/bwd_grid.py --out $W --budget 190 --modes fast,hopper,split --rounds 4 --shapes 0,3,6,1,4,7 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -E "checks|failed" $W/bwd_grid.txt | head -5 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -20 $W/bwd_grid_table.md
timeout 90 python3 benchmarks/raw/h200_s25b1/bwd_parts.py > $W/bwd_parts.txt 2>&1
stamp "bwd parts rc=$?"; grep -v Warn $W/bwd_parts.txt | head -60 | cut -c1-150
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
