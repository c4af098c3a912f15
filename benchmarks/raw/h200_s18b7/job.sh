#!/usr/bin/env bash
# Session 18 B7: the whole GPU suite on the final tree (the lengths item drop, the launch-bound
# auto path and the softcap fold landed after B2's suite), then issue 15's Llama block with
# more alternated rounds than B4's 7 (whose readings spread +-15%).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b7/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -15 | cut -c1-300
timeout 200 python3 benchmarks/llama_block.py --rounds 21 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama block rc=$?"; grep -v -E "Warn|return |run_backward" $W/llama_block.txt | tail -8 | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
