#!/usr/bin/env bash
# Prepared in session 42 (its B3: no machine came; run1/, run2/ hold the replies). Run as
# FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s43/job.sh <part>, carrying .whl; the outputs
# go to benchmarks/raw/<card>_s43bN/ with their results.
#   alibi ~200 s: B2 again where it was launch-bound: ALiBi over a KV cache at batch 1 (caches
#         of 256, 1024 and 4096 keys, a step and a 4-row draft) with 9 alternating rounds, and
#         the GPU tests of the decode kernels' ALiBi alone (B2's pytest of four files ran out of
#         its 150 s compiling before its summary; 22 passed, none failed).
#   mha   ~150 s (any card; added after B3's first tries): benchmarks/transformer_masks.py,
#         nn.Transformer (B8, 1k source and target, width 1024, 16 heads, 2 + 2 layers, bf16,
#         dropout 0.1) with a causal tgt_mask and padding masks, whose decoder self-attention
#         the backend now hands the kernels as a mask tensor: flashgen against Inductor.
#   enc   ~300 s (any card; added in session 43): hf_padded.py on HF's encoders with SDPA
#         attention, whose bidirectional padding mask the backend now hands the kernels per
#         key (was the [B, 1, N, N] tensor): BERT (B8 T512 width 768, 12 heads of 64) and
#         ModernBERT (B4 T2048 width 1024, 16 heads of 64, a 128-key local layer beside a
#         global one), right padding, flashgen against Inductor (PyTorch's SDPA with the mask).
#   ft    ~400 s (any card; session 43): examples/finetune_encoder.py, BERT-base fine-tuning
#         (32 x 512, right padding, attention dropout 0.1) eager / Inductor / flashgen.
#   h200  ~300 s (on an H200, needs_h200): issue 16's window sweep (B1's `windows` part) and
#         issue 15's host time (`host`) on the card the bars name, then issue 13's 650 TFLOP/s
#         row (B1 H16 16k d128 non-causal, eleven rounds).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
HERE=$(dirname "$0")
case "${1:-alibi}" in
alibi)
  timeout 100 python3 -u -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_decode_alibi.py \
    > $OUT/gpu_tests.txt 2>&1
  stamp "gpu tests rc=$?"; tail -3 $OUT/gpu_tests.txt
  timeout 300 python3 -u benchmarks/alibi_decode.py --batches 1 --rows 1,4 --caches 256,1024,4096 \
    --rounds 9 --out $OUT/alibi_decode_b1.json > $OUT/alibi_decode_b1.txt 2>&1
  stamp "alibi_decode rc=$?"; grep -E "^B[0-9]" $OUT/alibi_decode_b1.txt ;;
mha)
  timeout 280 python3 -u benchmarks/transformer_masks.py --out $OUT/transformer_masks.json \
    > $OUT/transformer_masks.txt 2>&1
  stamp "transformer_masks rc=$?"; grep -E "^fwd|^check" $OUT/transformer_masks.txt | cut -c1-250 ;;
enc)
  timeout 150 python3 -u benchmarks/hf_padded.py --family bert --attn sdpa --batch 8 --seq 512 \
    --width 768 --heads 12 --pad right --out $OUT/hf_bert.json > $OUT/hf_bert.txt 2>&1
  stamp "bert rc=$?"; grep -E "^fwd|^check" $OUT/hf_bert.txt | cut -c1-250
  timeout 150 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
    --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/hf_modernbert.json \
    > $OUT/hf_modernbert.txt 2>&1
  stamp "modernbert rc=$?"; grep -E "^fwd|^check" $OUT/hf_modernbert.txt | cut -c1-250 ;;
ft)
  timeout 450 python3 -u examples/finetune_encoder.py --json $OUT/finetune_bert.json \
    > $OUT/finetune_bert.txt 2>&1
  stamp "finetune rc=$?"; tail -6 $OUT/finetune_bert.txt | cut -c1-200 ;;
h200)
  nvidia-smi --query-gpu=name --format=csv,noheader
  bash $HERE/../h100_s42b1/job.sh windows
  bash $HERE/../h100_s42b1/job.sh host
  timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2 --rounds 11 --rep 40 \
    --vary ts4=tail_split:4@128f --check-dtypes bfloat16 --budget 140 --out $OUT/tflops \
    > $OUT/tflops.txt 2>&1
  stamp "tflops rc=$?"; grep '"tflops"' $OUT/tflops.txt | cut -c1-200
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv ;;
esac
