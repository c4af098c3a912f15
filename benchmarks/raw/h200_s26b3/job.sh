#!/usr/bin/env bash
# Session 26, batch B3 (issue 14), about 520 s: the session's defaults (head dim 128 causal with
# dQ's product before dK's, head dim 64 causal with two dQ staging buffers): the forward+backward
# grid through the library path beside cuDNN and FA2 (issue 14's bar), three alternating rounds
# a shape, then the whole GPU suite.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 240 python3 benchmarks/bwd_grid.py --out $W --budget 200 --modes fast,det --fa2 --rounds 3 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests -p no:randomly > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_suite.txt | tail -8 | cut -c1-500
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
