#!/usr/bin/env bash
# Session 12, batch B1 (issues 15, 16, 18).
# 1. the GPU suite on main (the mix's Inductor test has not run on a GPU yet);
# 2. HF Llama 16k training loss against a float32 reference: fp32 eager, bf16 eager twice,
#    flashgen (the mix: flashgen's forward, cuDNN's backward), flashgen with
#    FLASHGEN_VENDOR_BACKWARD=0 (flashgen's own backward), all compiling at once, timed one by one;
# 3. masks.py over every mask kind, forward and forward+backward (issue 16's table);
# 4. cProfile of a launch-bound forward+backward (where the backward's host time goes).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 230 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; grep -E "passed|failed|FAILED" $W/pytest_gpu.txt | cut -c1-250 | tail -15
LOCK=/tmp/gpu.lock; cd examples
L="--compile-scope model --shapes 1x16384 --steps 8 --warmup 2 --gpu-lock $LOCK"
export TORCHINDUCTOR_COMPILE_THREADS=4
timeout 260 python3 train_hf_llama.py $L --backends eager --dtype float32 --json $W/l16_fp32.json > $W/l16_fp32.log 2>&1 &
timeout 260 python3 train_hf_llama.py $L --backends eager --json $W/l16_eager_a.json > $W/l16_eager_a.log 2>&1 &
timeout 260 python3 train_hf_llama.py $L --backends eager --json $W/l16_eager_b.json > $W/l16_eager_b.log 2>&1 &
timeout 260 python3 train_hf_llama.py $L --backends flashgen --json $W/l16_flashgen.json > $W/l16_flashgen.log 2>&1 &
FLASHGEN_VENDOR_BACKWARD=0 timeout 260 python3 train_hf_llama.py $L --backends flashgen --json $W/l16_flashgen_own.json > $W/l16_flashgen_own.log 2>&1 &
wait
stamp "llama 16k done"
cd ..
python3 benchmarks/loss_spread.py $W/l16_fp32.json=fp32 $W/l16_eager_a.json=eager_a $W/l16_eager_b.json=eager_b \
  $W/l16_flashgen.json=flashgen_mix $W/l16_flashgen_own.json=flashgen_own 2>&1 | tee $W/loss_spread.txt
for f in $W/l16_*.json; do python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(sys.argv[1].split('/')[-1], r.get('tokens_per_s'), r.get('peak_mem_gb'))" $f; done
timeout 170 python3 benchmarks/masks.py --dirs fwd,fwd+bwd --budget 150 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -v Warn $W/masks.txt | grep -E "name=|err|FAIL|check" | cut -c1-420
timeout 60 python3 benchmarks/host_profile.py --backward --calls 3000 --top 35 > $W/host_profile_bwd.txt 2>&1
stamp "profile rc=$?"; head -60 $W/host_profile_bwd.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
