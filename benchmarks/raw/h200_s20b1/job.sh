#!/usr/bin/env bash
# Prepared in session 19 (its device budget spent) for the next session, about 330 s: the
# Hopper backward kind's first Optuna search (benchmarks/hopper_bwd_tune.py over
# flashgen.tune.hopper_bwd_space, 4k keys, head dims 64/128, causal both; each config checked
# against the split kind's gradients first), then issues 13/14's grid as session 19 B6 ran it.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s20/job_a.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output; ship a winner in hopper_bwd.CONFIGS only with
# the grid re-read on it.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 230 python3 benchmarks/hopper_bwd_tune.py --out $W/hopper_bwd_tune.json --trials 10 \
  --head-dims 64,128 --seqs 4096 --budget 45 > $W/hopper_bwd_tune.txt 2>&1
stamp "tune rc=$?"; grep -v Warn $W/hopper_bwd_tune.txt | cut -c1-400
FLASHGEN_IMPL=flashgen timeout 150 python3 benchmarks/bwd_grid.py --out $W --budget 130 --modes fast,det > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -4 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
