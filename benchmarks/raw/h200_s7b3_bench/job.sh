# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B3: HF Llama training, WHOLE model compiled, 2 x 4096 and 1 x 16384 tokens
# on the same package code as B2's 16k run (a second 16k reading, 8 timed steps), eager / Inductor /
# flashgen: six processes sharing the GPU through one lock (compile together, time alone); then,
# only if >= 30 s are left, `flashgen bench` hd128 GQA 16/4 causal (JSON rewritten per case).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
export FLASHGEN_COMMIT=5d5cb81 TORCHINDUCTOR_COMPILE_THREADS=8
LOCK=/tmp/bench-gpu-lock-$$
cd examples
for shape in 1x16384:16k 2x4096:4k; do
  for b in eager inductor flashgen; do
    timeout -s INT -k 3 80 python3 train_hf_llama.py --compile-scope model --shapes ${shape%:*} \
      --steps 8 --warmup 2 --backends $b --gpu-lock $LOCK \
      --json $OUT/llama_model_${shape#*:}_$b.json > $OUT/llama_model_${shape#*:}_$b.log 2>&1 &
  done
done
wait
echo "llama done at $(el) s"
tail -n 3 $OUT/llama_model_*.log
python3 ../benchmarks/train_merge.py $OUT/llama_model_16k_{eager,inductor,flashgen}.json \
  $OUT/llama_model_4k_{eager,inductor,flashgen}.json --json $OUT/train_hf_llama_model.json
echo "merge rc=$? at $(el) s"
cd ..
left=$(( 85 - $(el) ))
echo "bench gets $left s"
if [ $left -gt 30 ]; then
  timeout -s INT -k 2 $left python3 -m flashgen.cli bench --head-dim 128 --heads 16/4 --causal true \
    --seq-len 4096,16384,1024 --mode fwd,fwd_bwd --impl flashgen,op,sdpa_cudnn,sdpa_flash,flex \
    --rounds 1 --rep 20 --quiet --json $OUT/bench.json --csv $OUT/bench.csv > $OUT/bench.txt 2> $OUT/bench.err
  echo "bench rc=$? at $(el) s"; cat $OUT/bench.txt; tail -n 3 $OUT/bench.err
fi
