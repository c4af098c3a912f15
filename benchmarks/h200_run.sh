#!/usr/bin/env bash
# The H200 runs recorded in benchmarks/RESULTS.md, by name, so each figure's command is on file.
# Run from the repository root on the GPU machine, with optuna/SQLAlchemy/alembic wheels in .whl/
# installed with pip --no-index --no-deps --target into a directory on PYTHONPATH. Results go under $OUT.
#   benchmarks/h200_run.sh heldout   # tuner vs grid on the held-out cases, with and without seed
#   benchmarks/h200_run.sh gputests  # pytest -m gpu, the backend's tests on CUDA
#   benchmarks/h200_run.sh backend   # examples/backend_speed.py: models through the backend
#   benchmarks/h200_run.sh tune      # `flashgen tune` (its GPU defaults) into SQLite, exported
#   benchmarks/h200_run.sh vendortests tunegrid vendorgrid llama   # issue 15: a short `flashgen tune` of the
#       grid's specs (with the SDPA comparison), then the op vs every SDPA backend on the grid
#       (benchmarks/vendor_grid.py) and the Llama block vs Inductor, both on that database
#   benchmarks/h200_run.sh hoppertests hopper   # issue 13: the Hopper Gluon forward's GPU tests,
#       then benchmarks/hopper_probe.py (check + timing of the shipped configs vs cuDNN/FA2)
set -uo pipefail
: "${OUT:?set OUT}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
GRID_DB="${GRID_DB:-sqlite:////tmp/flashgen-h200-grid.sqlite3}"
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
for step in "$@"; do
    echo "== $step $(date -u +%H:%M:%S)"
    case $step in
    heldout)
        timeout 420 python3 benchmarks/tuner_vs_grid.py --case-set heldout --cold \
            --budget-s 390 --out "$OUT" ;;
    tuned)
        timeout 420 python3 benchmarks/tuner_vs_grid.py --case-set tuned --budget-s 390 \
            --out "$OUT" ;;
    gputests)
        timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests 2>&1 | tail -15 ;;
    backendtests)
        timeout 200 python3 -m pytest -q -p no:cacheprovider tests/compile/test_backend.py 2>&1 | tail -15 ;;
    backend)
        timeout 150 python3 examples/backend_speed.py --seqs 2048 --out "$OUT/backend_speed.json" ;;
    tune)
        db="sqlite:////tmp/flashgen-h200.sqlite3"
        timeout 300 python3 -m flashgen.cli tune --db "$db" --quiet
        python3 -m flashgen.cli db export "$OUT/nvidia-h200.json" --db "$db" \
            --gpu "NVIDIA H200" --measured-only ;;
    tunegrid)
        timeout 150 python3 -m flashgen.cli tune --db "$GRID_DB" --quiet --head-dim 64,128 \
            --causal both --seq-len 1024,4096,16384 --direction fwd,bwd --trials 2 --patience 1 \
            > "$OUT/tune_grid.txt" 2>&1
        tail -40 "$OUT/tune_grid.txt"
        python3 -m flashgen.cli db show --db "$GRID_DB" | tee "$OUT/db_show_grid.txt"
        python3 -m flashgen.cli db export "$OUT/nvidia-h200-grid.json" --db "$GRID_DB" \
            --gpu "NVIDIA H200" --measured-only ;;
    vendorgrid)
        FLASHGEN_DB_URL="$GRID_DB" timeout 75 python3 benchmarks/vendor_grid.py --rep 30 \
            --out "$OUT/vendor_grid.json" ;;
    llama)
        FLASHGEN_DB_URL="$GRID_DB" timeout 75 python3 examples/backend_speed.py \
            --styles llama_sdpa --seqs 2048 --out "$OUT/backend_speed_llama.json" ;;
    llamashapes)  # the Llama block's attention (GQA 16/4, hd64) alone, 3 rounds
        FLASHGEN_DB_URL="$GRID_DB" timeout 40 python3 benchmarks/vendor_grid.py --rounds 3 \
            --shapes "4,16,4,2048,64;4,16,16,2048,64" --out "$OUT/vendor_llama_shapes.json" \
            2>&1 | grep -v Warning | grep -v "return scaled" ;;
    vendortests)
        timeout 40 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_vendor.py \
            > "$OUT/vendortests.txt" 2>&1; tail -8 "$OUT/vendortests.txt" ;;
    hoppertests)
        timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels/test_hopper.py \
            2>&1 | tail -8 ;;
    hopper)
        timeout 120 python3 benchmarks/hopper_probe.py check shipped 2>&1 | tail -3
        timeout 200 python3 benchmarks/hopper_probe.py bench shipped 2>&1 | tail -16 ;;
    *) echo "unknown step $step"; exit 2 ;;
    esac
    echo "== $step done rc=$? $(date -u +%H:%M:%S)"
done
