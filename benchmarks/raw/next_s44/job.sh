#!/usr/bin/env bash
# Prepared in session 44. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s44/job.sh <part>,
# carrying .whl; outputs to benchmarks/raw/<card>_s44bN/ with their results.
#   ckpt ~400 s (any card): hf_padded.py on HF Llama (sdpa, B4 T2048 width 2048, 16 heads of 128,
#        GQA 4, 2 layers, bf16 training graphs) with HF's gradient checkpointing, whose attention
#        the backend now replaces inside each checkpoint (before: not found, Inductor's SDPA ran):
#        left padding (causal + padding per key) and HF's training call without attention_mask
#        (the mask from its own position ids, now proven causal), flashgen against Inductor.
#   nomask ~120 s (any card): the training call without attention_mask or cache and without
#        checkpointing (before this session: the [B, 1, N, N] packed-sequence mask read whole).
#   compat ~150 s (any card): the session's new CPU tests (checkpoint bodies, position-id masks,
#        float attributes under dynamic=True) under the device's torch 2.11 and transformers 5.17,
#        whose Dynamo internals (the checkpoint HOP, guards added from a backend) they lean on.
#   train ~400 s (any card): examples/train_hf_llama.py --checkpointing at 2x4096 (HF's gradient
#        checkpointing: the attention replaced inside each layer's checkpoint), eager, Inductor
#        and flashgen (the loss curves checked against eager's).
# The parts of benchmarks/raw/next_s43/job.sh (alibi, mha, enc, ft, h200) are still to run.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
case "${1:-ckpt}" in
ckpt)
  for pad in left none; do
    timeout 190 python3 -u benchmarks/hf_padded.py --family llama --attn sdpa --checkpointing \
      --pad $pad --out $OUT/ckpt_$pad.json > $OUT/ckpt_$pad.txt 2>&1
    stamp "ckpt $pad rc=$?"; grep -E "^fwd|^check|sdpa  " $OUT/ckpt_$pad.txt | cut -c1-250
  done ;;
compat)
  TRITON_INTERPRET=1 timeout 280 python3 -u -m pytest -q -p no:cacheprovider \
    tests/compile/test_checkpoint.py tests/compile/test_hf_position_masks.py \
    tests/compile/test_float_attributes.py > $OUT/compat.txt 2>&1
  stamp "compat rc=$?"; tail -3 $OUT/compat.txt ;;
train)
  timeout 450 python3 -u examples/train_hf_llama.py --checkpointing --shapes 2x4096 \
    --json $OUT/train_ckpt.json > $OUT/train_ckpt.txt 2>&1
  stamp "train rc=$?"; tail -6 $OUT/train_ckpt.txt | cut -c1-200 ;;
nomask)
  timeout 110 python3 -u benchmarks/hf_padded.py --family llama --attn sdpa --pad none \
    --out $OUT/nomask.json > $OUT/nomask.txt 2>&1
  stamp "nomask rc=$?"; grep -E "^fwd|^check|sdpa  " $OUT/nomask.txt | cut -c1-250 ;;
esac
