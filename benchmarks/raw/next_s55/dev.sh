#!/usr/bin/env bash
# Session 55's device calls (carry .whl; FLASHGEN_COMMIT=<sha>).
#   first: on an H200 next_s49's h200 part first (issue 15's host bars, issue 13's 650 TFLOP/s
#          row, ~250 s); then the routes'/masks'/launches' GPU tests (the flat test's HF-view
#          cases never ran since 6f8a51b, ~150 s); then T5's encoder (never timed as a model:
#          relative bias + padding read as one [B, H, N, N] tensor, forward and training, ~120 s)
#   varlen: benchmarks/varlen.py (packed sequences: checks, then packed / padded / plain timed;
#          the packed TMA builds of session 7 never timed), ~90 s
#   bwd:   masked_bwd.py (a masked call's backward: host µs by layer, cProfile of the op), ~60 s
#   hand:  hand-written masked sites by size (T5's encoder, eager: 0.866x Inductor at B8 T512 in
#          call 9; T5 at 1k and 2k, HF BERT eager at 8 x 512 and 32 x 512), ~200 s
#   engine: engine_probe.py (the autograd engine's device thread and our backward node), ~60 s
#   causal: (for session 56) small hand-written causal sites, which no rule keeps: HF Llama eager
#          without padding (HF's mask from its own position ids, proven causal: the plain op) at
#          8 x 512 and 8 x 1k, head dim 64; the rule's kept per-key case (right padding) beside,
#          ~150 s
#   host:  next_s52/host_sleep.py once and next_s54/mbert_parts.py (ModernBERT's host with the
#          flat call), ~120 s
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
first)
  if echo "$name" | grep -q H200; then
    bash benchmarks/raw/next_s49/dev.sh h200 2>&1 | grep -v "^card\|load average"
  fi
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
    tests/kernels/test_attn_mask.py tests/kernels/test_launch_gpu.py \
    > $OUT/gpu_tests.txt 2>&1
  stamp "gpu tests rc=$?"; tail -2 $OUT/gpu_tests.txt | cut -c1-300; grep FAILED $OUT/gpu_tests.txt | head
  for attn in sdpa eager; do
    timeout 200 python3 -u benchmarks/hf_padded.py --family t5 --attn $attn --batch 8 --seq 512 \
      --width 768 --heads 12 --layers 2 --pad right --out $OUT/t5_$attn.json > $OUT/t5_$attn.txt 2>&1
    stamp "t5 $attn rc=$?"; grep -E "^fwd|^check|host us|Error" $OUT/t5_$attn.txt | cut -c1-250
  done ;;
varlen)
  timeout 200 python3 -u benchmarks/varlen.py --out $OUT --budget 150 > $OUT/varlen.txt 2>&1
  stamp "varlen rc=$?"; grep -v -i warn $OUT/varlen.txt | tail -25 | cut -c1-200 ;;
bwd)
  timeout 150 python3 -u benchmarks/raw/next_s55/masked_bwd.py $OUT/masked_bwd.json > $OUT/masked_bwd.txt 2>&1
  stamp "masked_bwd rc=$?"; grep -E "^bert|^modernbert|Error" $OUT/masked_bwd.txt | cut -c1-600 ;;
hand)
  # T5 at 512 under the new rule (its sites kept), then every size with the sites forced to
  # flashgen's kernels (FLASHGEN_IMPL=flashgen turns the rule off): what replacing them reads
  for c in "t5 8 512 default" "t5 8 1024 flashgen" "t5 4 2048 flashgen" "bert 8 512 default" "bert 32 512 default"; do
    set -- $c
    FLASHGEN_IMPL=$([ $4 = flashgen ] && echo flashgen) timeout 150 python3 -u benchmarks/hf_padded.py \
      --family $1 --attn eager --batch $2 --seq $3 --width 768 --heads 12 --layers 2 --pad right \
      --out $OUT/hand_$1_$2_$3_$4.json > $OUT/hand_$1_$2_$3_$4.txt 2>&1
    stamp "$1 eager B$2 T$3 $4 rc=$?"; grep -E "^fwd|^check|host us|Error" $OUT/hand_$1_$2_$3_$4.txt | cut -c1-250
  done ;;
causal)
  for c in "none 8 512" "none 8 1024" "right 8 512"; do
    set -- $c
    timeout 150 python3 -u benchmarks/hf_padded.py --family llama --attn eager --pad $1 \
      --batch $2 --seq $3 --width 768 --heads 12 --layers 2 --out $OUT/causal_$1_$2_$3.json \
      > $OUT/causal_$1_$2_$3.txt 2>&1
    stamp "llama eager pad $1 B$2 T$3 rc=$?"; grep -E "^fwd|^check|host us|Error" $OUT/causal_$1_$2_$3.txt | cut -c1-250
  done ;;
engine)
  timeout 150 python3 -u benchmarks/raw/next_s55/engine_probe.py $OUT/engine.json 2>&1 | grep -v -i warn | tail -8 | cut -c1-600
  stamp "engine" ;;
host)
  SHAPES=1 ROUNDS=2 timeout 100 python3 -u benchmarks/raw/next_s52/host_sleep.py $OUT/hs.json 2>&1 \
    | grep -v -i "warn\|transformers\]" | grep -E "prim|sdpa|composite|round"
  stamp "host_sleep"
  timeout 200 python3 -u benchmarks/raw/next_s54/mbert_parts.py $OUT/parts.json > $OUT/parts.txt 2>&1
  stamp "parts rc=$?"; grep -v -i "warn\|transformers\]" $OUT/parts.txt | cut -c1-200 | tail -60 ;;
esac
done
