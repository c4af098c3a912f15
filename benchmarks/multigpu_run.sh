#!/usr/bin/env bash
# Issue 19's measurements on a host with several GPUs (nvidia-h200-x2), by step name, so each
# figure in benchmarks/RESULTS.md has its command on file. Run from the repository root with
# optuna/SQLAlchemy/alembic importable (PYTHONPATH); results go under $OUT.
#   benchmarks/multigpu_run.sh smoke     # `flashgen tune --gpus all` on a tiny task set (any GPU count)
#   benchmarks/multigpu_run.sh train     # examples/distributed_train.py: one GPU, then DDP and FSDP2
#                                        # on 2 GPUs (--check: losses vs one process), tokens/s per GPU
#   benchmarks/multigpu_run.sh tune      # one task set tuned by `flashgen tune` on one GPU and by
#                                        # `--gpus all`, each from a cold cache; wall times, winners
#                                        # (= the steps tune_many, tune_one, compare, in that order:
#                                        # separately, something can run on GPU 1 during tune_one)
# Sizes come from the environment (defaults below), so a short slot can shrink them.
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONUNBUFFERED=1
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
TUNE_SET=${TUNE_SET:-"--head-dim 64,128 --causal both --seq-len 1024,4096 --direction fwd --dtype bfloat16"}
TUNE_TRIALS=${TUNE_TRIALS:-10}
TRAIN=${TRAIN:-"--steps 12 --warmup 4 --batch 8 --seq 1024 --dim 1024 --heads 8 --layers 4 --fallback aot_eager"}
# Seconds per command (LIMIT, or LIMIT_MANY/LIMIT_ONE/LIMIT_SINGLE/LIMIT_DIST for one of them);
# SIGINT first, so that `flashgen tune` stops its workers and keeps what they finished.
LIMIT=${LIMIT:-600}
run() { local limit=$1; shift; timeout -s INT -k 5 "$limit" "$@"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }

# Cold caches per run: the second run must not find the first one's compiled kernels.
fresh() { rm -rf "/tmp/mg-$1" "/tmp/mg-$1".sqlite3*; mkdir -p "/tmp/mg-$1"
          export FLASHGEN_CACHE_DIR="/tmp/mg-$1" TRITON_CACHE_DIR="/tmp/mg-$1/triton"; }

# The tune steps. Wall times go to $OUT/wall_<run>.txt for `compare`.
tune_many() {
    fresh many
    local t; t=$(now)
    run "${LIMIT_MANY:-$LIMIT}" python3 -m flashgen.cli tune --gpus all --db sqlite:////tmp/mg-many.sqlite3 $TUNE_SET \
        --trials "$TUNE_TRIALS" --patience 0 --quiet > "$OUT/tune_many.txt" 2> "$OUT/tune_many.err"
    local rc=$?; since "$t" > "$OUT/wall_many.txt"
    echo "   --gpus all rc=$rc wall_s=$(cat "$OUT/wall_many.txt")"; tail -3 "$OUT/tune_many.err"
}
tune_one() {  # on GPU 0 alone (CUDA_VISIBLE_DEVICES=0): the other GPU stays free
    fresh one
    local t; t=$(now)
    CUDA_VISIBLE_DEVICES=0 run "${LIMIT_ONE:-$LIMIT}" python3 -m flashgen.cli tune --db sqlite:////tmp/mg-one.sqlite3 $TUNE_SET \
        --trials "$TUNE_TRIALS" --patience 0 --quiet > "$OUT/tune_one.txt" 2> "$OUT/tune_one.err"
    local rc=$?; since "$t" > "$OUT/wall_one.txt"
    echo "   one GPU rc=$rc wall_s=$(cat "$OUT/wall_one.txt")"; tail -3 "$OUT/tune_one.err"
}
compare() {
    cat "$OUT/tune_one.txt" "$OUT/tune_many.txt"
    python3 benchmarks/multigpu_compare.py /tmp/mg-one.sqlite3 /tmp/mg-many.sqlite3 \
        --wall-one "$(cat "$OUT/wall_one.txt")" --wall-many "$(cat "$OUT/wall_many.txt")" --out "$OUT/tune_compare.json"
    cp /tmp/mg-one.sqlite3 /tmp/mg-many.sqlite3 "$OUT/"
}

for step in "$@"; do
    echo "== $step $(date -u +%H:%M:%S) ($NGPU GPU(s))"
    [ "$NGPU" -lt 2 ] && echo "   only $NGPU GPU: the --gpus all and DDP/FSDP figures need 2"
    case $step in
    smoke)
        fresh smoke
        t=$(now)
        run "$LIMIT" python3 -m flashgen.cli tune --gpus all --db sqlite:////tmp/mg-smoke.sqlite3 --head-dim 64 \
            --causal false --seq-len 1024 --direction fwd --dtype bfloat16 --trials 6 --patience 0 \
            --quiet > "$OUT/smoke.txt" 2> "$OUT/smoke.err"
        echo "   rc=$? wall_s=$(since "$t")"; cat "$OUT/smoke.txt"; tail -5 "$OUT/smoke.err" ;;
    train)
        fresh train
        run "${LIMIT_SINGLE:-$LIMIT}" python3 examples/distributed_train.py --mode single $TRAIN --out "$OUT/train.jsonl" \
            2> "$OUT/train_single.err" | cut -c1-400; echo "   single rc=${PIPESTATUS[0]}"
        if [ "$NGPU" -ge 2 ]; then
            run "${LIMIT_DIST:-$LIMIT}" python3 -m torch.distributed.run --nproc-per-node 2 --standalone examples/distributed_train.py --mode ddp,fsdp \
                --check $TRAIN --out "$OUT/train.jsonl" 2> "$OUT/train_dist.err" | cut -c1-400
            echo "   torchrun rc=${PIPESTATUS[0]}"
        fi
        tail -3 "$OUT/train_dist.err" 2>/dev/null
        # The bar: each distributed mode's tokens/s per GPU over the one-GPU run's.
        python3 - "$OUT/train.jsonl" <<'PY'
import json, sys
try:
    lines = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
except OSError:
    sys.exit("   no train.jsonl: no run finished")
single = next((x for x in lines if x["mode"] == "single"), None)
for x in lines:
    ratio = x["tokens_per_s_per_rank"] / single["tokens_per_s_per_rank"] if single else None
    print(f"   {x['mode']:6} world {x['world']} {x['tokens_per_s_per_rank']:>10.0f} tok/s per GPU"
          + (f"  {ratio:.3f}x one GPU" if ratio else "")
          + (f"  losses match: {x['match']} (max rel diff {x['max_rel_diff']:.2e})" if "match" in x else ""))
PY
        ;;
    tune) tune_many; tune_one; compare ;;
    tune_many) tune_many ;;
    tune_one) tune_one ;;
    compare) compare ;;
    *) echo "unknown step $step" ;;
    esac
done
