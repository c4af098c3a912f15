#!/usr/bin/env bash
# Prepared in session 46 for the next device call (either card; the card's name is printed).
# Carrying .whl. Parts, by value:
#   suite ~300 s: the whole GPU suite (session 46's direct key_hull launch and the capture
#         fixes first run on a GPU there).
#   models ~300 s: the model scripts under the masked rule (BERT, ModernBERT, nn.Transformer
#         in training with dropout; `next_s43/job.sh mha enc`) and HF Llama left padding.
#   sweep ~60 s: next_s46/masked_sweep.py with HF's expanded per-key masks (--hf) and without,
#         for MASKED_MIN_FLOPS.
#   h200 (an H200 only): issue 15's host time and issue 13's 650 TFLOP/s row (next_s46/dev.sh).
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
. benchmarks/device_env.sh > /dev/null 2>&1
case "${1:-suite}" in
suite)
  timeout 560 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
  stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20 ;;
models)
  for p in mha enc; do bash benchmarks/raw/next_s43/job.sh $p; done
  timeout 120 python3 -u benchmarks/hf_padded.py --family llama --attn sdpa --pad left \
    --out $OUT/llama_left.json > $OUT/llama_left.txt 2>&1
  stamp "llama left rc=$?"; grep -E "^fwd|^check" $OUT/llama_left.txt | cut -c1-200 ;;
sweep)
  timeout 150 python3 -u benchmarks/raw/next_s46/masked_sweep.py $OUT/sweep_hf.csv --hf 2>&1 | grep -v warn
  timeout 150 python3 -u benchmarks/raw/next_s46/masked_sweep.py $OUT/sweep.csv 2>&1 | grep -v warn ;;
h200)
  bash benchmarks/raw/next_s46/dev.sh ;;
esac
