#!/usr/bin/env bash
# Session 16, batch 2: (1) issue 15: host time of each step of a launch-bound forward with grad
# and backward (host_steps.py --backward, hd64 and hd128); (2) issue 16: the dropout kernels
# tuned (`flashgen tune --dropout`, d128 causal 4k, into a fresh SQLite file) and masks.py's
# dropout row with that database; (3) the overlap probe prepared in session 15
# (probe_job_s15.sh), four shifts and one with CUDA_DEVICE_MAX_CONNECTIONS=32.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s16b2/job.sh, carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
for d in 64 128; do
  timeout 90 python3 benchmarks/host_steps.py --backward --shape 1,1,128,$d --calls 1000 > $W/host_bwd_d$d.txt 2>&1
  stamp "host_steps bwd d$d rc=$?"; cat $W/host_bwd_d$d.txt
done
DB=sqlite:///$W/dropout.sqlite3
timeout 220 python3 -m flashgen.cli tune --dropout --head-dim 128 --causal true --seq-len 4096 --trials 16 --db $DB > $W/tune_dropout.txt 2>&1
stamp "tune rc=$?"; tail -12 $W/tune_dropout.txt | cut -c1-200
python3 -m flashgen.cli db export $W/dropout_records.json --db $DB > /dev/null 2>&1; stamp "export rc=$?"
FLASHGEN_DB_URL=$DB timeout 100 python3 benchmarks/masks.py --only dropout_causal --budget 60 --no-check --out $W/masks_tuned.csv > $W/masks_tuned.txt 2>&1
stamp "masks tuned rc=$?"; grep -E "name=" $W/masks_tuned.txt | cut -c1-330
for K in 0 1 2 3; do
  timeout 40 python3 benchmarks/overlap_probe.py --shift $K --reps 3 > $W/probe_$K.txt 2>&1
  stamp "shift $K rc=$?"; tail -1 $W/probe_$K.txt | cut -c1-200
done
CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 40 python3 benchmarks/overlap_probe.py --shift 0 --reps 3 > $W/probe_c32_0.txt 2>&1
stamp "connections 32 rc=$?"; tail -1 $W/probe_c32_0.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
