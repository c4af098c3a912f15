#!/usr/bin/env bash
# Session 25, batch B3 (issue 14), about 520 s: the session's defaults (GQA head dim 128 causal
# on the hopper kind from 1k keys, hopper_bwd.AUTO_GROUPED; the dQ staging tile swizzled by 32
# bytes at head dim 64): the whole GPU suite, then the forward+backward grid through the
# library path beside cuDNN and FA2 (issue 14's bar), three alternating rounds a shape.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s25b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 270 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_suite.txt | tail -8 | cut -c1-500
FLASHGEN_IMPL=flashgen timeout 240 python3 benchmarks/bwd_grid.py --out $W --budget 200 --modes fast,det --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
