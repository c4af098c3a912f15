#!/usr/bin/env bash
# Session 51's device calls (either card; its name is printed first). Carrying .whl.
#   mbert ~420 s: is HF ModernBERT's 0.770x (session 51's validate call, right after the GPU
#         suite) the tree or the machine's state? ModernBERT on the fresh machine, the GPU
#         suite (with the mended key-padding case), ModernBERT again, and the flashgen cache
#         dir's listing in between.
#   state / files / ab: what session 51's later calls ran (README of raw/h100_s51).
#   prof ~150 s: mbert_prof.py, the flashgen-compiled ModernBERT's forward in 8 rounds, each a
#         do_bench reading and a profile (kernel times against the wall, the SM clock), fresh,
#         then again after the GPU suite (where the slow readings came). ~350 s in all.
#   sinks ~200 s: sinks_time.py, what attention sinks' extra pass over the output costs
#         (GPT-OSS-like shapes), against the call without sinks, SDPA and GPT-OSS's eager
#         attention; the output checked against float32 eager.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
mbert() {
  timeout 120 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa --batch 4 \
    --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/mbert_$1.json > $OUT/mbert_$1.txt 2>&1
  stamp "modernbert $1 rc=$?"; grep -E "^fwd|^check" $OUT/mbert_$1.txt | cut -c1-200
}
for part in "$@"; do
case "$part" in
mbert)
  mbert fresh
  ls -la ~/.cache/flashgen 2>&1 | head; ls ~/.cache/flashgen/* 2>/dev/null | head
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
    -k key_padding_masks_match > $OUT/hopper_mask_gpu.txt 2>&1
  stamp "hopper mask gpu rc=$?"; tail -2 $OUT/hopper_mask_gpu.txt | cut -c1-300
  timeout 160 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py \
    tests/kernels/test_padding.py tests/kernels/test_bwd_kind.py tests/compile > $OUT/validate_gpu.txt 2>&1
  stamp "gpu tests rc=$?"; tail -1 $OUT/validate_gpu.txt | cut -c1-300
  ls -la ~/.cache/flashgen 2>&1 | head; find ~/.cache/flashgen -maxdepth 1 -newer $OUT/mbert_fresh.txt | head
  mbert after_suite ;;
state)
  # what is left running on the GPU after the suite: processes, utilisation, clocks
  timeout 160 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py \
    tests/kernels/test_padding.py tests/kernels/test_bwd_kind.py tests/compile > $OUT/validate_gpu2.txt 2>&1
  stamp "gpu tests rc=$?"; tail -1 $OUT/validate_gpu2.txt | cut -c1-200
  for i in 1 2 3; do
    nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw,temperature.gpu,memory.used --format=csv,noheader
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
    sleep 2
  done
  ps aux --sort=-%cpu | head -8 | cut -c1-200
  mbert state1
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  sleep 20; mbert state2 ;;
files)
  # which files the GPU suite writes (repository copy, HOME, /tmp), then ModernBERT
  touch $OUT/marker; sleep 1
  timeout 160 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py \
    tests/kernels/test_padding.py tests/kernels/test_bwd_kind.py tests/compile > $OUT/validate_gpu3.txt 2>&1
  stamp "gpu tests rc=$?"; tail -1 $OUT/validate_gpu3.txt | cut -c1-200
  echo "-- repo"; find . -newer $OUT/marker -type f -not -path "./.git/*" -not -name "*.pyc" | head -30
  git status --short 2>&1 | head -20
  echo "-- home"; find ~ -maxdepth 4 -newer $OUT/marker -not -path "*/.triton/*" 2>/dev/null | head -30
  echo "-- tmp"; find /tmp -maxdepth 2 -newer $OUT/marker 2>/dev/null | head -30
  env | grep -i -E "cache|flashgen|triton|inductor" | head
  mbert files ;;
ab)
  # the tree of session 48's 1.342x reading (de5cb9f, carried as old_tree/) against this one,
  # alternating, each a fresh process
  for i in 1 2; do
    for t in old new; do
      if [ $t = old ]; then pp=/tmp/site:$PWD/old_tree; else pp=/tmp/site:$PWD; fi
      PYTHONPATH=$pp timeout 70 python3 -u benchmarks/hf_padded.py --family modernbert --attn sdpa \
        --batch 4 --seq 2048 --width 1024 --heads 16 --pad right --out $OUT/ab_${t}$i.json > $OUT/ab_${t}$i.txt 2>&1
      stamp "$t $i rc=$?"; grep -E "^fwd|compile" $OUT/ab_${t}$i.txt | cut -c1-140
    done
  done ;;
prof)
  timeout 150 python3 -u benchmarks/raw/next_s51/mbert_prof.py $OUT/prof_fresh.json 2>&1 | grep -v -i warn
  stamp "prof fresh rc=$?"
  timeout 160 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_attn_mask.py \
    tests/kernels/test_padding.py tests/kernels/test_bwd_kind.py tests/compile > $OUT/validate_gpu4.txt 2>&1
  stamp "gpu tests rc=$?"
  timeout 150 python3 -u benchmarks/raw/next_s51/mbert_prof.py $OUT/prof_after.json 2>&1 | grep -v -i warn
  stamp "prof after rc=$?" ;;
sinks)
  timeout 200 python3 -u benchmarks/raw/next_s51/sinks_time.py $OUT/sinks_time.json 2>&1 | grep -v -i warn
  stamp "sinks_time rc=$?" ;;
esac
done
