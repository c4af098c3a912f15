# tree: /work/wt-bwd
# limit: 100
# issue 14 (helper bwd), B4 (only if device time is left): the same as B3 (fwd+bwd vs cuDNN, modes
# fast = overlap default, det, seq; every mode checked against float64 and for bits first) with the
# GQA 32/8 shapes first (B3's budget ran out before them), then hd64 16k, then the MHA grid again.
python3 benchmarks/bwd_grid.py --out "$OUT" --budget 86 --rep 40 --workers 15 --modes fast,det,seq --no-fwd --shapes 6,7,8,5,0,1,2,3,4
