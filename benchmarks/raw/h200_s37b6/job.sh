#!/usr/bin/env bash
# Session 37 B6: the output layout's final rule (torch.empty_like(q): dense in q's dimension
# order) on the GPU.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s37b6/job.sh      (carrying .whl)
# 1. The layout's GPU tests (as B4) plus the mask, padding, window and varlen kernels' tests.
# 2. llama_block.py's replaced inference block (B3: 1.016x Inductor) and host_time.py (the
#    forward's allocation is now torch.empty_like(q)).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 260 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_out_layout.py tests/kernels/test_hopper.py tests/kernels/test_forward.py \
  tests/kernels/test_decode.py tests/kernels/test_aligned.py tests/kernels/test_attn_mask.py \
  tests/kernels/test_padding.py tests/kernels/test_window.py tests/kernels/test_varlen.py \
  tests/compile tests/runtime tests/test_op.py > $OUT/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $OUT/tests.txt; grep -E "^FAILED|^ERROR" $OUT/tests.txt | head
timeout 60 python3 benchmarks/llama_block.py --rounds 11 --rep 20 --inference --batch 4 --seq 4096 \
  --width 2048 --out $OUT/infer_4k.json > $OUT/infer_4k.txt 2>&1
stamp "infer_4k rc=$?"; grep -E "^fwd|^check|replace " $OUT/infer_4k.txt | cut -c1-220
timeout 90 python3 benchmarks/host_time.py --rounds 5 --out $OUT/host_time.json > $OUT/host_time.txt 2>&1
stamp "host_time rc=$?"; grep -v -i warn $OUT/host_time.txt | head -8 | cut -c1-200
# 3. Issue 13's 650 TFLOP/s row again (B1 H16 and H32/8 16k d128 non-causal, the shipped record,
#    as session 35 B9; tail_split 4 as a variant beside it). The kernels are unchanged since.
timeout 110 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2,8 --rounds 5 --rep 40 \
  --vary ts4=tail_split:4@128f --check-dtypes bfloat16 --budget 100 --out $OUT/tail > $OUT/tail.txt 2>&1
stamp "tail rc=$?"; grep '"tflops"' $OUT/tail.txt | cut -c1-200
