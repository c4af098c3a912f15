#!/usr/bin/env bash
# One GPU batch of issue 18 (run from the repository root, results under $OUT): HF Llama training
# (examples/train_hf_llama.py, the whole model compiled) as one process per shape, backend and
# run, started together; then, with the seconds left, `flashgen bench` hd128 GQA 16/4 causal
# (its JSON rewritten per case, so a cut run keeps what it measured). The batches
# benchmarks/raw/h200_s7b{2,3,4}_bench/job.sh are this script with their parameters.
#
# Parameters (environment), defaults in brackets:
#   FLASHGEN_COMMIT  the commit the results are recorded under [?]
#   SHAPES    training shapes as BATCHxTOKENS:LABEL, the label naming the files [1x16384:16k]
#   BACKENDS  [eager inductor flashgen]
#   RUNS      run names when each backend runs more than once ("a b": files *_a, *_b) []
#   STEPS     timed steps (after 2 warm-up steps) [8]      LIMIT  seconds per process [80]
#   LOCK      1: the processes share the GPU through one lock (compile together, time alone) [1]
#   VERSIONS  1: print the transformers and torch versions beside the runs [0]
#   TAIL      lines of each training log printed afterwards (0: none) [3]
#   MERGE     1: join the runs into train_hf_llama_model.json (benchmarks/train_merge.py) [1]
#   COMPARE   1: print the per-step loss difference of the first two runs [0]
#   END       seconds from the start by which the bench must be done [85]
#   MIN_LEFT  the bench runs only when more seconds than this are left [30]
#   SEQS      the bench's --seq-len [4096,16384,1024]
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
SHAPES=${SHAPES:-1x16384:16k}; BACKENDS=${BACKENDS:-eager inductor flashgen}; RUNS=${RUNS:-}
STEPS=${STEPS:-8}; LIMIT=${LIMIT:-80}; LOCK=${LOCK:-1}; VERSIONS=${VERSIONS:-0}; TAIL=${TAIL:-3}
MERGE=${MERGE:-1}; COMPARE=${COMPARE:-0}; END=${END:-85}; MIN_LEFT=${MIN_LEFT:-30}
SEQS=${SEQS:-4096,16384,1024}
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
lock=()
[ "$LOCK" = 1 ] && lock=(--gpu-lock "/tmp/bench-gpu-lock-$$")
cd examples
jsons=()
for shape in $SHAPES; do
  for b in $BACKENDS; do
    for run in ${RUNS:-_}; do
      name=llama_model_${shape#*:}_$b$([ "$run" = _ ] || echo "_$run")
      timeout -s INT -k 3 "$LIMIT" python3 train_hf_llama.py --compile-scope model \
        --shapes "${shape%:*}" --steps "$STEPS" --warmup 2 --backends "$b" ${lock[@]+"${lock[@]}"} \
        --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 &
      jsons+=("$OUT/$name.json")
    done
  done
done
if [ "$VERSIONS" = 1 ]; then
  python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" &
fi
wait
echo "training done at $(el) s"
[ "$TAIL" -gt 0 ] && tail -n "$TAIL" "$OUT"/llama_model_*.log
if [ "$MERGE" = 1 ]; then
  python3 ../benchmarks/train_merge.py "${jsons[@]}" --json "$OUT/train_hf_llama_model.json"
  echo "merge rc=$? at $(el) s"
fi
if [ "$COMPARE" = 1 ]; then
  python3 - "${jsons[0]}" "${jsons[1]}" <<'PY'
import json, sys
a, b = (json.load(open(p))["rows"][0]["losses"] for p in sys.argv[1:3])
print("run a", [round(x, 4) for x in a]); print("run b", [round(x, 4) for x in b])
print("per-step |a-b|", [round(abs(x - y), 4) for x, y in zip(a, b)], "max", max(abs(x - y) for x, y in zip(a, b)))
PY
fi
cd ..
left=$(( END - $(el) ))
echo "bench gets $left s"
if [ $left -gt "$MIN_LEFT" ]; then
  timeout -s INT -k 2 $left python3 -m flashgen.cli bench --head-dim 128 --heads 16/4 --causal true \
    --seq-len "$SEQS" --mode fwd,fwd_bwd --impl flashgen,op,sdpa_cudnn,sdpa_flash,flex \
    --rounds 1 --rep 20 --quiet --json "$OUT/bench.json" --csv "$OUT/bench.csv" > "$OUT/bench.txt" 2> "$OUT/bench.err"
  echo "bench rc=$? at $(el) s"; cat "$OUT/bench.txt"; tail -n 3 "$OUT/bench.err"
fi
