# tree: /work/wt-bwd
# limit: 100
# issue 14 (helper bwd), B3: fwd+bwd vs cuDNN over the 12-shape grid + GQA 32/8, modes fast (default:
# dQ/dK-dV overlap on), det (no NaN fill of written buffers now), seq (overlap off); every mode
# checked against float64 and for bits first; then the GPU tests of tests/kernels/test_bwd_overlap.py
# (overlap bit equality, graph capture, deterministic bit equality) on kernels the checks compiled.
git log --oneline -1 2>/dev/null || true
python3 benchmarks/bwd_grid.py --out "$OUT" --budget 58 --rep 40 --workers 15 --modes fast,det,seq --no-fwd
timeout 32 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_bwd_overlap.py -rs 2>&1 | tail -25 | tee "$OUT/pytest.txt"
