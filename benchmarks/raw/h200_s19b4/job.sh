#!/usr/bin/env bash
# Session 19 B4: (1) the Hopper backward's GPU tests (the split kind with the Hopper dK/dV
# kernel; dQ by TMA reduce-add), (2) benchmarks/hopper_bwd.py: the one-pass Hopper kind with dQ
# by element atomics (session 8's configs) and by TMA reduce-add, split kind and cuDNN in the
# same process, (3) issues 13/14's grid as B2 ran it, now with the Hopper dK/dV kernel at
# head dim 128 non-causal (hopper_bwd.DKDV_AUTO).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s19b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_hopper_bwd.py > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-400
timeout 230 python3 benchmarks/hopper_bwd.py --out $W --budget 190 --check-timeout 60 --rep 20 --configs \
  128:2,2,1,168,1,0,0 128:2,2,1,168,1,0,0,1,1 128:2,2,2,168,0,0,0,1,1 128:2,2,1,168,0,0,0,1,1 \
  64:2,2,1,168,0,0,0 64:2,2,1,168,0,0,0,1,1 64:2,2,1,168,1,0,0,1,1 > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks:|FAILED|causal=|summary" $W/hopper_bwd.txt | cut -c1-700
FLASHGEN_IMPL=flashgen timeout 150 python3 benchmarks/bwd_grid.py --out $W --budget 130 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -24 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
