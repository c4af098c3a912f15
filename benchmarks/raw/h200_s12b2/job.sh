#!/usr/bin/env bash
# Session 12, batch B2 (issues 16, 18).
# 1. mask_kernels.py: kernel-by-kernel device time of each mask kind's forward+backward, on this
#    tree (the dQ kernel's own config for window/softcap/lengths/ALiBi) and on old_tree/ (c64c0bc,
#    before that change), back to back;
#    The Hopper forward for boolean key-padding masks is back (reverted in S11 on an A/B whose
#    "old" run imported the new tree: masks.py put the checkout before PYTHONPATH); its GPU tests
#    and masks.py's key-padding row here, and the same in the portable family (a second process);
# 2. dropout alone vs after softcap in masks.py (B1 read dropout 2x slower than S11 B3 did);
# 3. HF Llama 16k: a float32 eager run alone (the reference curve), then bf16 eager twice,
#    flashgen (the mix) and flashgen with FLASHGEN_VENDOR_BACKWARD=0 at once (timed one by one).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper.py tests/kernels/test_launch_gpu.py \
  tests/kernels/test_attn_mask.py tests/kernels/test_padding.py tests/kernels/test_backward.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | cut -c1-300 | tail -25
timeout 90 python3 benchmarks/masks.py --only attn_mask_bool_pad --dirs fwd,fwd+bwd --out $W/pad_hopper.csv > $W/pad_hopper.txt 2>&1
FLASHGEN_FWD_FAMILY=portable timeout 60 python3 benchmarks/masks.py --no-check --only attn_mask_bool_pad --dirs fwd --out $W/pad_portable.csv > $W/pad_portable.txt 2>&1
stamp "pad"; grep -h -E "name=|check" $W/pad_*.txt | cut -c1-300
timeout 150 python3 benchmarks/mask_kernels.py --iters 5 > $W/mask_kernels_new.txt 2>&1
stamp "mask_kernels new rc=$?"
PYTHONPATH=/tmp/site:$PWD/old_tree:$PWD timeout 120 python3 benchmarks/mask_kernels.py --iters 5 \
  --only pad_right_full,pad_right_causal,alibi_full,window_2sided_512,softcap_causal > $W/mask_kernels_old.txt 2>&1
stamp "mask_kernels old rc=$?"
timeout 60 python3 benchmarks/masks.py --no-check --only dropout_causal --dirs fwd --out $W/drop_alone.csv > $W/drop_alone.txt 2>&1
timeout 60 python3 benchmarks/masks.py --no-check --only softcap_causal,dropout_causal --dirs fwd --out $W/drop_after.csv > $W/drop_after.txt 2>&1
stamp "dropout order"; grep -h "name=" $W/drop_*.txt | cut -c1-250
LOCK=/tmp/gpu.lock; cd examples
L="--compile-scope model --shapes 1x16384 --steps 8 --warmup 2 --gpu-lock $LOCK"
export TORCHINDUCTOR_COMPILE_THREADS=4
timeout 150 python3 train_hf_llama.py $L --backends eager --dtype float32 --json $W/l16_fp32.json > $W/l16_fp32.log 2>&1
stamp "fp32 rc=$?"
timeout 200 python3 train_hf_llama.py $L --backends eager --json $W/l16_eager_a.json > $W/l16_eager_a.log 2>&1 &
timeout 200 python3 train_hf_llama.py $L --backends eager --json $W/l16_eager_b.json > $W/l16_eager_b.log 2>&1 &
timeout 200 python3 train_hf_llama.py $L --backends flashgen --json $W/l16_flashgen.json > $W/l16_flashgen.log 2>&1 &
FLASHGEN_VENDOR_BACKWARD=0 timeout 200 python3 train_hf_llama.py $L --backends flashgen --json $W/l16_flashgen_own.json > $W/l16_flashgen_own.log 2>&1 &
wait
stamp "llama 16k done"
cd ..
python3 benchmarks/loss_spread.py $W/l16_fp32.json=fp32 $W/l16_eager_a.json=eager_a $W/l16_eager_b.json=eager_b \
  $W/l16_flashgen.json=flashgen_mix $W/l16_flashgen_own.json=flashgen_own 2>&1 | tee $W/loss_spread.txt
for f in $W/l16_*.json; do python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(sys.argv[1].split('/')[-1], r.get('tokens_per_s'), r.get('peak_mem_gb'), r.get('note'))" $f; done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
