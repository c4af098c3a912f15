# tree: /work/wt-bench
# limit: 90
# bench (issue 18), batch B4: (1) the noise floor of B3's loss check: HF Llama whole model 1 x 16384
# run EAGERLY twice (same seed, same batches, 2 + 8 steps as in B3; no timing needed), to see how far
# two eager runs drift apart at the step-9 loss spike where flashgen's gap was 0.078; (2) with the
# seconds left, `flashgen bench` hd128 GQA 16/4 causal for the plot (JSON rewritten per case).
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
export FLASHGEN_COMMIT=39c1c21
cd examples
for run in a b; do
  timeout -s INT -k 3 40 python3 train_hf_llama.py --compile-scope model --shapes 1x16384 \
    --steps 8 --warmup 2 --backends eager \
    --json $OUT/llama_model_16k_eager_$run.json > $OUT/llama_model_16k_eager_$run.log 2>&1 &
done
wait
echo "eager pair done at $(el) s"
python3 - $OUT/llama_model_16k_eager_a.json $OUT/llama_model_16k_eager_b.json <<'PY'
import json, sys
a, b = (json.load(open(p))["rows"][0]["losses"] for p in sys.argv[1:3])
print("eager a", [round(x, 4) for x in a]); print("eager b", [round(x, 4) for x in b])
print("per-step |a-b|", [round(abs(x - y), 4) for x, y in zip(a, b)], "max", max(abs(x - y) for x, y in zip(a, b)))
PY
cd ..
left=$(( 85 - $(el) ))
echo "bench gets $left s"
if [ $left -gt 30 ]; then
  timeout -s INT -k 2 $left python3 -m flashgen.cli bench --head-dim 128 --heads 16/4 --causal true \
    --seq-len 4096,16384,1024 --mode fwd,fwd_bwd --impl flashgen,op,sdpa_cudnn,sdpa_flash,flex \
    --rounds 1 --rep 20 --quiet --json $OUT/bench.json --csv $OUT/bench.csv > $OUT/bench.txt 2> $OUT/bench.err
  echo "bench rc=$? at $(el) s"; cat $OUT/bench.txt; tail -n 3 $OUT/bench.err
fi
