#!/usr/bin/env bash
# Session 32 B3 (issues 13, 15, 16), two calls carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b3/job.sh suite   (about 330 s)
#     the whole GPU suite on the tree without stream-K (its removal put the template back to
#     the pre-stream-K text; the split and plain kernels assemble to the same instruction
#     counts), then the launch path's host time beside SDPA's.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b3/job.sh models  (about 250 s)
#     the op's grid against every SDPA backend with the shipped records (issue 15's bar: every
#     shape >= 1.0x the fastest), and the Llama block against Inductor (session 28 B8's commands).
# Results in $OUT/<part>.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = suite ]; then
  timeout 290 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
  stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
  timeout 40 python3 benchmarks/host_time.py --rounds 5 > $W/host_time.txt 2>&1
  stamp "host_time rc=$?"; grep -E "^  (fwd|fwd_bwd|bwd) " $W/host_time.txt | cut -c1-200
  cd $W && tar czf $OUT/suite.tgz . && exit 0
fi
timeout 170 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 6 --rep 20 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|op vs" | tail -20 | cut -c1-250
timeout 70 python3 benchmarks/llama_block.py --rounds 21 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama rc=$?"; grep -v Warn $W/llama_block.txt | grep -E "ratio|check" | cut -c1-300
cd $W && tar czf $OUT/models.tgz .
