#!/usr/bin/env bash
# Prepared in session 47 for the next device call (either card; the card's name is printed).
# Carrying .whl. Parts, by value:
#   models ~330 s: first, on a machine that has run nothing yet, HF ModernBERT (its 0.73x
#         reading of session 47 came as a machine's first model run after the GPU suite, and
#         did not come again); then the model scripts under session 47's masked thresholds
#         (BERT, ModernBERT, nn.Transformer in training, BERT at 32 x 512 without dropout)
#         and `nvidia-smi` before and after.
#   sweep ~110 s: masked_sweep2.py --final on the tree (block lists from 1k x 1k), then
#         --additive (dense additive masks: choice.MASKED_MIN_FLOPS_ADDITIVE is unmeasured).
#   repro ~450 s: the GPU suite (since session 48 it also checks the split backward's dK/dV
#         kernel storing zeros past a key-padding mask's range, d882302), then ModernBERT at
#         once (session 47's order: was its 0.73x the suite's wake?), nvidia-smi and the
#         processes left between.
#   h200 (an H200 only): issue 15's host time and issue 13's 650 TFLOP/s row, issue 16's
#         windows (next_s46/dev.sh).
#   bsfuzz ~240 s (added in session 48, which had no device): block_sparse_fuzz.py on the
#         GPU (the dense-mask block lists' two kernels and the walk, compiled, at random masks,
#         shapes and tiles, forward and gradients against float64), then the new GPU test
#         test_tile_lists_on_gpu with the rest of test_attn_mask.py.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; uptime
. benchmarks/device_env.sh > /dev/null 2>&1
case "${1:-models}" in
models)
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
  timeout 150 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
    --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/modernbert_first.json \
    > $OUT/modernbert_first.txt 2>&1
  stamp "modernbert first rc=$?"; grep -E "^fwd|^check|^compile" $OUT/modernbert_first.txt | cut -c1-200
  for p in mha enc; do bash benchmarks/raw/next_s43/job.sh $p; done
  # HF BERT at 32 x 512 without dropout (26 GFLOP a site): replaced under the expanded-mask
  # thresholds (19 GFLOP with a backward), kept before
  timeout 150 python3 -u benchmarks/hf_padded.py --family bert --attn sdpa --batch 32 --seq 512 \
    --width 768 --heads 12 --pad right --out $OUT/hf_bert32.json > $OUT/hf_bert32.txt 2>&1
  stamp "bert 32 rc=$?"; grep -E "^fwd|^check" $OUT/hf_bert32.txt | cut -c1-200
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv ;;
repro)
  timeout 400 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
  stamp "suite rc=$?"; tail -2 $OUT/suite.txt
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,utilization.gpu --format=csv
  ps aux --sort=-%cpu | head -8 | cut -c1-150
  timeout 150 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
    --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/modernbert_after.json \
    > $OUT/modernbert_after.txt 2>&1
  stamp "modernbert after the suite rc=$?"; grep -E "^fwd|^check" $OUT/modernbert_after.txt | cut -c1-200 ;;
sweep)
  timeout 150 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/sweep.csv --final 2>&1 \
    | grep -v -i warn
  timeout 150 python3 -u benchmarks/raw/next_s47/masked_sweep2.py $OUT/additive.csv --additive \
    2>&1 | grep -v -i warn ;;
h200)
  bash benchmarks/raw/next_s46/dev.sh ;;
bsfuzz)
  timeout 120 python3 -u benchmarks/block_sparse_fuzz.py --device cuda --cases 300 --seed 100 \
    > $OUT/bsfuzz.txt 2>&1
  stamp "bsfuzz rc=$?"; tail -3 $OUT/bsfuzz.txt
  # through flashgen.attention: the GPU's run-time tiles (the dQ kernel's own on sm_90)
  timeout 90 python3 -u benchmarks/block_sparse_fuzz.py --device cuda --cases 150 --seed 500 \
    --via attention > $OUT/bsfuzz_attention.txt 2>&1
  stamp "bsfuzz attention rc=$?"; tail -3 $OUT/bsfuzz_attention.txt
  timeout 60 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_attn_mask.py \
    > $OUT/attn_mask_gpu.txt 2>&1
  stamp "attn_mask gpu rc=$?"; tail -2 $OUT/attn_mask_gpu.txt ;;
esac
