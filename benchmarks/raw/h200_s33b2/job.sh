#!/usr/bin/env bash
# Prepared in session 32 (issues 13, 15, 16), not run: the device budget was spent. Two calls,
# carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s33/job.sh suite   (about 480 s)
#     The whole GPU suite on the final tree, with room to finish on a cold machine (session 32
#     B3's 290 s limit stopped it two tests short; B4 ran the changed areas). New since B4:
#     nn.MultiheadAttention sites left to PyTorch on the static-shape rule
#     (test_gpu_static_multihead_attention_follows_pytorchs_pick, never run).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s33/job.sh grid    (about 260 s)
#     The op's grid against every SDPA backend with the paired ratio (new in vendor_grid.py:
#     each round's readings moments apart; issue 15's every-shape bar, whose rows below 1.0 ran
#     the same cuDNN kernels on both sides in B3/B5), then the hand-written models against
#     Inductor (examples/backend_speed.py gpt,llama_repeat at 2k; issue 15's third bar; session
#     29 B4: GPT 5.9x / 2.2x).
# Results in $OUT/<part>.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = suite ]; then
  timeout 470 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
  stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
  cd $W && tar czf $OUT/suite.tgz . && exit 0
fi
timeout 170 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 6 --rep 20 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|op vs" | tail -22 | cut -c1-300
timeout 80 python3 examples/backend_speed.py --styles gpt,llama_repeat --seqs 2048 > $W/backend_speed.txt 2>&1
stamp "backend_speed rc=$?"; grep -E "replaced|ms" $W/backend_speed.txt | cut -c1-250 | tail -10
cd $W && tar czf $OUT/grid.tgz .
