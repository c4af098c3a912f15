#!/usr/bin/env bash
# Session 57's device calls (carry .whl; FLASHGEN_COMMIT=<sha>).
#   drop:  small hand-written sites with attention dropout 0.1 in training after 2649804 (kept
#          below HAND_WRITTEN_PLAIN_MIN_FLOPS_DROPOUT): Llama eager B8 T512 and BERT eager B8 T512
#          by default (kept), and Llama eager B8 T1k (12.9 GFLOP) with its sites forced
#          (FLASHGEN_IMPL=flashgen: the rule off), ~200 s
#   first: next_s56/dev.sh first (on an H200 issue 15's host bars and issue 13's 650 TFLOP/s row)
#   sdpadrop: (for session 58) small SDPA calls with dropout and no mask, which no rule keeps
#          (session 47 measured them only from 12.9 GFLOP: 1.15-1.18x with a backward): HF Llama
#          with SDPA attention (is_causal, dropout 0.1) and BERT with SDPA attention without
#          padding (dropout 0.1) at B8 T512 and B16 T512 (3.2-12.9 GFLOP a site), ~250 s
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
# hf_drop ATTN FAMILY BATCH SEQ IMPL: HF `family` with `attn` attention, no padding, attention
# dropout 0.1, training graphs (IMPL flashgen: FLASHGEN_IMPL=flashgen, the size rules off)
hf_drop() {
  local tag=$1drop_$2_$3_$4_$5
  FLASHGEN_IMPL=$([ $5 = flashgen ] && echo flashgen) timeout 150 python3 -u benchmarks/hf_padded.py \
    --family $2 --attn $1 --pad none --batch $3 --seq $4 --width 768 --heads 12 --layers 2 \
    --attn-dropout 0.1 --out $OUT/$tag.json > $OUT/$tag.txt 2>&1
  stamp "$2 $1 none B$3 T$4 dropout 0.1 $5 rc=$?"
  grep -E "^fwd|^check|host us|Error|keep  |replace  " $OUT/$tag.txt | cut -c1-250
}
for part in "$@"; do
case "$part" in
first|confirm)
  bash benchmarks/raw/next_s56/dev.sh "$part" 2>&1 | grep -v "^card\|load average" ;;
drop)  # (call 9's files were named drop_<family>_<batch>_<seq>_<impl>; now eagerdrop_...)
  for c in "llama 8 512 default" "bert 8 512 default" "llama 8 1024 flashgen"; do
    hf_drop eager $c
  done ;;
sdpadrop)
  for c in "llama 8 512" "llama 16 512" "bert 8 512" "bert 16 512"; do
    hf_drop sdpa $c default
  done ;;
esac
done
