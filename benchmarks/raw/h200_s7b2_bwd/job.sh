# tree: /work/wt-bwd
# limit: 100
# issue 14 (helper bwd): fwd+bwd vs cuDNN over the 12-shape grid + GQA 32/8 in fast, deterministic
# and overlap modes (each mode checked against float64 and for bit equality first).
git log --oneline -1 2>/dev/null || true
python3 benchmarks/bwd_grid.py --out "$OUT" --budget 84 --rep 50 --workers 15
