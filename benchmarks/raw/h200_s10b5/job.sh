#!/usr/bin/env bash
# Session 10, batch B5 (issues 15, 16, 18), run as `FLASHGEN_COMMIT=<sha> bash job.sh` (the
# device's git HEAD is stale): the ALiBi forward without per-tile conversions (5d2f8e1): GPU
# tests, speed against the unmasked kernel; the key-range skip of a key-padding mask A/B in one
# process pair (--no-hull); the Llama block with 41 rounds; HF Llama 4k and 16k on this commit.
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/work; mkdir -p $W
echo "commit $FLASHGEN_COMMIT"
timeout 80 python3 -m pytest -m gpu -n 4 -q --no-header -p no:cacheprovider -rfE \
  tests/kernels/test_alibi.py -k hopper_forward > $W/pytest_alibi.txt 2>&1
stamp "alibi gpu tests rc=$?"; tail -2 $W/pytest_alibi.txt
FLASHGEN_FWD_FAMILY=hopper timeout 60 python3 benchmarks/masks.py --no-check --only alibi_causal,alibi_full \
  --shape 4,16,4,4096,128 --dirs fwd --budget 45 --out $W/masks_alibi_hopper.csv > $W/masks_alibi_hopper.txt 2>&1
stamp "masks alibi rc=$?"; grep name= $W/masks_alibi_hopper.txt
for hull in "" --no-hull; do
  timeout 45 python3 benchmarks/masks.py --no-check --only attn_mask_bool_pad $hull --dirs fwd,fwd+bwd \
    --budget 35 --out $W/masks_pad${hull}.csv > $W/masks_pad${hull}.txt 2>&1
  stamp "masks pad $hull rc=$?"; grep name= $W/masks_pad${hull}.txt | cut -c1-60,120-400
done
timeout 80 python3 benchmarks/llama_block.py --rounds 41 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama block rc=$?"; grep -E "^fwd|ok=" $W/llama_block.txt
LOCK=/tmp/gpu.lock; cd examples
for shape in 1x16384:16k 2x4096:4k; do for b in eager inductor flashgen; do
  TORCHINDUCTOR_COMPILE_THREADS=3 timeout 150 python3 train_hf_llama.py --compile-scope model --shapes ${shape%:*} --steps 8 --warmup 2 \
      --backends $b --gpu-lock $LOCK --json $W/llama_model_${shape#*:}_$b.json > $W/llama_model_${shape#*:}_$b.log 2>&1 &
done; done; wait
stamp "llama done"
python3 ../benchmarks/train_merge.py $W/llama_model_16k_{eager,inductor,flashgen}.json \
    $W/llama_model_4k_{eager,inductor,flashgen}.json --json $W/train_hf_llama_model.json | tail -8
cd ..; tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
