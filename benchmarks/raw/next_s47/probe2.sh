#!/usr/bin/env bash
# Session 47: ModernBERT under host contention (16 busy processes on the 16 cores), then the
# masked sweep with HF's expanded masks and without.
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; uptime
. benchmarks/device_env.sh > /dev/null 2>&1
pids=""; for i in $(seq 16); do (while :; do :; done) & pids="$pids $!"; done
timeout 150 python3 -u benchmarks/raw/next_s47/mbert_probe.py model x > $OUT/model_busy.txt 2>&1; stamp "busy rc=$?"
kill $pids; uptime
grep -E "^fwd|^check" $OUT/model_busy.txt | cut -c1-150
timeout 150 python3 -u benchmarks/raw/next_s46/masked_sweep.py $OUT/sweep_hf.csv --hf > $OUT/sweep_hf.txt 2>&1; stamp "sweep hf rc=$?"
timeout 150 python3 -u benchmarks/raw/next_s46/masked_sweep.py $OUT/sweep.csv > $OUT/sweep.txt 2>&1; stamp "sweep rc=$?"
grep -v -i warn $OUT/sweep_hf.txt | tail -30
