#!/usr/bin/env bash
# Session 28 B2 (issues 15, 16; run as one command line, kept here as that line split), about
# 180 s: the op's grid against every SDPA backend with the shipped records, the Llama block
# against Inductor, and every mask row at head dim 128 (forward, forward+backward).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|op vs" | tail -20 | cut -c1-250
timeout 90 python3 benchmarks/llama_block.py --rounds 11 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama rc=$?"; grep -v Warn $W/llama_block.txt | tail -8 | cut -c1-300
timeout 150 python3 benchmarks/masks.py --budget 135 --no-check --dirs fwd,fwd+bwd --shape 4,16,4,4096,128 --out $W/masks_d128.csv > $W/masks_d128.txt 2>&1
stamp "masks rc=$?"
