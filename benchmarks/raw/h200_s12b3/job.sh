#!/usr/bin/env bash
# Session 12, batch B3 (issues 16, 18) on 4df02ca: the restored Hopper forward for boolean
# key-padding masks, the backward's key hull on TMA GPUs, the dQ kernel's own config for window,
# lengths, ALiBi and boolean masks, additive key padding kept off the Hopper family.
# 1. the GPU suite, and beside it (correctness only: the loss curves) HF Llama 16k under
#    Inductor and under flashgen with FLASHGEN_IMPL=sdpa_cudnn (the flashgen backend's graph
#    with cuDNN's attention both ways): does the compiled graph alone move the loss as much
#    as flashgen's kernels did in B2?
# 2. masks.py over every mask kind, then mask_kernels.py for the key-padding rows.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
LOCK=/tmp/gpu.lock
L="--compile-scope model --shapes 1x16384 --steps 8 --warmup 2 --gpu-lock $LOCK"
( cd examples; export TORCHINDUCTOR_COMPILE_THREADS=4
  timeout 280 python3 train_hf_llama.py $L --backends inductor --json $W/l16_inductor.json > $W/l16_inductor.log 2>&1 &
  FLASHGEN_IMPL=sdpa_cudnn timeout 280 python3 train_hf_llama.py $L --backends flashgen --json $W/l16_flashgen_cudnn.json > $W/l16_flashgen_cudnn.log 2>&1 &
  wait ) &
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED" $W/pytest_gpu.txt | cut -c1-250 | tail -15
wait
stamp "llama done"
cp benchmarks/raw/h200_s12b2/l16_*.json $W/ 2>/dev/null
python3 benchmarks/loss_spread.py $W/l16_eager_a.json=eager_a $W/l16_eager_b.json=eager_b $W/l16_inductor.json=inductor \
  $W/l16_flashgen_cudnn.json=flashgen_cudnn $W/l16_flashgen.json=flashgen_mix $W/l16_flashgen_own.json=flashgen_own 2>&1 | tee $W/loss_spread.txt
timeout 170 python3 benchmarks/masks.py --dirs fwd,fwd+bwd --budget 160 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -v Warn $W/masks.txt | grep -E "name=|ERROR|FAIL" | cut -c1-330
timeout 60 python3 benchmarks/mask_kernels.py --only attn_mask_bool_pad,pad_right_full,alibi_full,window_2sided_512 > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
