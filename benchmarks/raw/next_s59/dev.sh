#!/usr/bin/env bash
# Session 59's plan for the next device time (carry .whl; FLASHGEN_COMMIT=<sha>). Parts:
#   first: next_s56/dev.sh first (on an H200: issue 15's host bars and issue 13's 650 TFLOP/s
#          row; GPU tests; T5), ~500 s; session 59 had only H100s
#   edge:  SDPA calls with dropout 0.1 at the new threshold (choice.SDPA_DROPOUT_MIN_FLOPS, 12
#          GFLOP: replaced from it), where session 59 read one process each: Llama B8 T1k (12.9
#          GFLOP a site, 1.093x but 0.965x by the rounds' median), Llama B32 T512 (12.9), BERT
#          B16 T512 (12.9), and Llama B16 T1k (25.8), each twice, ~600 s (two calls: edge,
#          then edge2); edge first runs the size rules' GPU test (test_masked_keep.py -m gpu)
#   dropop: the op alone with dropout (h100_s59/drop_op.py) and host_profile.py --dropout 0.1 /
#          0 (where the dropout backward's extra host time goes), ~80 s
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
drop() {  # drop FAMILY BATCH SEQ TAG: HF FAMILY, SDPA attention, no padding, dropout 0.1
  local tag=sdpadrop_$1_$2_$3_$4
  timeout 150 python3 -u benchmarks/hf_padded.py --family $1 --attn sdpa --pad none \
    --batch $2 --seq $3 --width 768 --heads 12 --layers 2 --attn-dropout 0.1 \
    --out $OUT/$tag.json > $OUT/$tag.txt 2>&1
  stamp "$1 sdpa none B$2 T$3 dropout 0.1 ($4) rc=$?"
  grep -E "^fwd|^check|host us|Error|keep  |replace  " $OUT/$tag.txt | cut -c1-250
}
for part in "$@"; do
case "$part" in
first)
  bash benchmarks/raw/next_s56/dev.sh first 2>&1 | grep -v "^card\|load average" ;;
edge)
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/compile/test_masked_keep.py \
    > $OUT/keep_gpu_tests.txt 2>&1
  stamp "gpu tests of the size rules rc=$?"; tail -2 $OUT/keep_gpu_tests.txt | cut -c1-300
  for c in "llama 8 1024" "llama 32 512" "bert 16 512" "llama 16 1024"; do drop $c a; done ;;
edge2)
  for c in "llama 8 1024" "llama 32 512" "bert 16 512" "llama 16 1024"; do drop $c b; done ;;
dropop)
  timeout 120 python3 -u benchmarks/raw/h100_s59/drop_op.py $OUT/drop_op.json > $OUT/drop_op.txt 2>&1
  stamp "drop_op rc=$?"; grep causal= $OUT/drop_op.txt
  for p in 0.1 0; do
    timeout 100 python3 benchmarks/host_profile.py --shape 8,12,512,64 --causal --backward \
      --dropout $p --calls 2000 --top 45 --impl '' > $OUT/prof_$p.txt 2>&1
    stamp "host_profile dropout $p rc=$?"
  done ;;
esac
done
# (a reply brings back at most 8 files: pack the rest, e.g. `cd $OUT && tar czf all.tgz *.txt
#  *.json && rm -f *.txt *.json` at the end of the command)
