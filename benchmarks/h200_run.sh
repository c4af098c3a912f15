#!/usr/bin/env bash
# The H200 runs recorded in benchmarks/RESULTS.md, by name, so each figure's command is on file.
# Run from the repository root on the GPU machine, with optuna/SQLAlchemy/alembic wheels in .whl/
# (../shared/device/prepare.sh). Results go under $OUT.
#   benchmarks/h200_run.sh heldout   # tuner vs grid on the held-out cases, with and without seed
#   benchmarks/h200_run.sh gputests  # pytest -m gpu, the backend's tests on CUDA
#   benchmarks/h200_run.sh backend   # examples/backend_speed.py: models through the backend
#   benchmarks/h200_run.sh tune      # `flashgen tune` (its GPU defaults) into SQLite, exported
set -uo pipefail
: "${OUT:?set OUT}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
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
        timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_backend.py 2>&1 | tail -15 ;;
    backend)
        timeout 150 python3 examples/backend_speed.py --seqs 2048 --out "$OUT/backend_speed.json" ;;
    tune)
        db="sqlite:////tmp/flashgen-h200.sqlite3"
        timeout 300 python3 -m flashgen.cli tune --db "$db" --quiet
        python3 -m flashgen.cli db export "$OUT/nvidia-h200.json" --db "$db" \
            --gpu "NVIDIA H200" --measured-only ;;
    *) echo "unknown step $step"; exit 2 ;;
    esac
    echo "== $step done rc=$? $(date -u +%H:%M:%S)"
done
