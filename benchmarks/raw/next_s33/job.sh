#!/usr/bin/env bash
# Prepared in session 32 (issues 13, 15, 16), not run: the device budget was spent. About 560 s.
# 1. The whole GPU suite on the final tree, with room to finish on a cold machine (session 32
#    B3's 290 s limit stopped it two tests short; B4 ran the changed areas). New since B4:
#    nn.MultiheadAttention sites left to PyTorch on the static-shape rule
#    (test_gpu_static_multihead_attention_follows_pytorchs_pick, never run).
# 2. A hand-written-attention block and an nn.TransformerEncoderLayer against Inductor
#    (examples/backend_speed.py gpt,llama_repeat at 2k), to see the hand-written gains kept
#    (issue 15's third bar; session 29 B4: 5.9x / 2.2x GPT at 2k).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s33/job.sh carrying .whl; results in
# $OUT/suite.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 470 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
cd $W && tar czf $OUT/suite.tgz . && cd - > /dev/null
timeout 80 python3 examples/backend_speed.py --styles gpt,llama_repeat --seqs 2048 > $W/backend_speed.txt 2>&1
stamp "backend_speed rc=$?"; grep -E "replaced|ms" $W/backend_speed.txt | cut -c1-250 | tail -10
cd $W && tar czf $OUT/suite.tgz .
