# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B2: HF Llama training, WHOLE model compiled, 1 x 16384 tokens (the bar's
# missing figure), eager / Inductor / flashgen as three processes sharing the GPU through one lock
# (compile together, time alone); then, with the seconds left, `flashgen bench` hd128 GQA 16/4
# causal (JSON rewritten after every case, so a cut run keeps what it measured).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
export FLASHGEN_COMMIT=64eaeeb
LOCK=/tmp/bench-gpu-lock-$$
cd examples
for b in eager inductor flashgen; do
  timeout -s INT -k 3 76 python3 train_hf_llama.py --compile-scope model --shapes 1x16384 \
    --steps 5 --warmup 2 --backends $b --gpu-lock $LOCK \
    --json $OUT/llama_model_16k_$b.json > $OUT/llama_model_16k_$b.log 2>&1 &
done
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" &
wait
echo "llama done at $(el) s"
tail -n 4 $OUT/llama_model_16k_*.log
python3 ../benchmarks/train_merge.py $OUT/llama_model_16k_{eager,inductor,flashgen}.json \
  --json $OUT/train_hf_llama_model.json
echo "merge rc=$? at $(el) s"
cd ..
left=$(( 84 - $(el) ))
echo "bench gets $left s"
if [ $left -gt 12 ]; then
  timeout -s INT -k 2 $left python3 -m flashgen.cli bench --head-dim 128 --heads 16/4 --causal true \
    --seq-len 16384,4096,1024 --mode fwd,fwd_bwd --impl flashgen,op,sdpa_cudnn,sdpa_flash,flex \
    --rounds 1 --rep 20 --quiet --json $OUT/bench.json --csv $OUT/bench.csv > $OUT/bench.txt 2> $OUT/bench.err
  echo "bench rc=$? at $(el) s"; cat $OUT/bench.txt; tail -n 3 $OUT/bench.err
fi
