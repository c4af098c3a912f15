#!/usr/bin/env bash
# Prepared in session 17 for the next session (about 300 s): issue 15's other bars, last read in
# sessions 10-11: the grid through the op with the shipped records against every SDPA backend
# (vendor_grid.py) and the Llama block against Inductor (llama_block.py). Run as
# FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor grid rc=$?"; grep -v Warn $W/vendor_grid.txt | tail -30
timeout 100 python3 benchmarks/llama_block.py --rounds 7 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama block rc=$?"; grep -v Warn $W/llama_block.txt | tail -12
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
