#!/usr/bin/env bash
# Session 10, batch B2 (issues 15, 18): the shipped records' SDPA comparison redone with what the
# run time launches (recompare.py: the Hopper forward), then the grid through the op with those
# records against every SDPA backend (vendor_grid.py); host time at hd64/hd128 after session 9's
# launch edits; HF Llama 4k training on this commit; the ViT example with 30 timed steps.
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/work; mkdir -p $W
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout 150 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json --out $OUT/nvidia-h200.json --json $W/recompare.json --rounds 3 --rep 40 > $W/recompare.txt 2>&1
stamp "recompare rc=$?"; cat $W/recompare.txt | grep -v Warn | tail -26
[ -s $OUT/nvidia-h200.json ] && cp $OUT/nvidia-h200.json tuning_db/nvidia-h200.json
timeout 170 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor grid rc=$?"; grep -v Warn $W/vendor_grid.txt | tail -30
for shape in 1,1,128,128 1,1,128,64; do
  timeout 45 python3 benchmarks/host_time.py --label s10b2 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; tail -14 $W/host_${shape//,/x}.txt
done
LOCK=/tmp/gpu.lock; cd examples
for b in eager inductor flashgen; do
  TORCHINDUCTOR_COMPILE_THREADS=4 timeout 120 python3 train_hf_llama.py --compile-scope model --shapes 2x4096 --steps 8 --warmup 2 \
      --backends $b --gpu-lock $LOCK --json $W/llama_model_4k_$b.json > $W/llama_model_4k_$b.log 2>&1 &
done; wait
stamp "llama 4k done"
python3 ../benchmarks/train_merge.py $W/llama_model_4k_{eager,inductor,flashgen}.json --json $W/train_hf_llama_model_4k.json | tail -5
timeout 150 python3 vision_encoder.py --steps 30 --warmup 3 --json $W/vit_224.json > $W/vit_224.log 2>&1
stamp "vit rc=$?"; grep -v Warn $W/vit_224.log | tail -6
cd ..; tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
