#!/usr/bin/env bash
# Session 27 B4 (issue 14's deterministic goal, 0.9x cuDNN; 0.896-0.915x in session 26): the
# deterministic mode with the split kind's dK/dV kernel the Gluon template's (no dQ, no
# atomics) on every shape (bwd_grid.py mode det_dkdv) against the shipped choice
# (hopper_bwd.DKDV_AUTO: head dim 128 without causal masking from 1k keys only; causal and head
# dim 64 measured 0.86-1.05x the portable kernel in session 19, before the spill fixes of
# session 20), three alternating rounds, float64 and bit-repeatability checks first.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s27b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 220 python3 benchmarks/bwd_grid.py --out $W --budget 190 --modes det,det_dkdv --rounds 3 --no-fwd > $W/bwd_grid.txt 2>&1
stamp "grid rc=$?"; grep -E "checks|failed" $W/bwd_grid.txt | head -5 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -24 $W/bwd_grid_table.md
