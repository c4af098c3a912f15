#!/usr/bin/env bash
# Prepared in session 28 (issue 15; not run then), about 280 s: the op's grid against every SDPA
# backend again with more rounds (session 28 B2's worst rows, 0.985-0.999x, ran cuDNN on both
# sides or within 1% of it over two rounds: is that the spread?), a second reading of the Llama
# block (B2: 1.029x / 1.031x paired over 11 rounds; session 18: 0.983-0.991x), and the launch
# path's host time beside SDPA's.
# Results straight under $OUT. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s28b8/job.sh
# carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 6 --rep 20 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|op vs" | tail -20 | cut -c1-250
timeout 70 python3 benchmarks/llama_block.py --rounds 21 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama rc=$?"; grep -v Warn $W/llama_block.txt | grep -E "ratio|check" | cut -c1-300
timeout 40 python3 benchmarks/host_time.py --rounds 5 > $W/host_time.txt 2>&1
stamp "host_time rc=$?"; grep -E "^  (fwd|fwd_bwd|bwd) " $W/host_time.txt | cut -c1-200
