#!/usr/bin/env bash
# Session 46's device call (either card; the card's name is printed first):
# issue 15's forward+backward host remainder split (bwd_thread.py, new), host_time.py; on an
# H200 then issue 13's 650 TFLOP/s row and issue 16's window sweep.
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 120 python3 -u benchmarks/bwd_thread.py --rounds 7 --out $OUT/bwd_thread.json \
  > $OUT/bwd_thread.txt 2>&1
stamp "bwd_thread rc=$?"; cat $OUT/bwd_thread.txt
bash benchmarks/raw/h100_s42b1/job.sh host
if echo "$name" | grep -q H200; then
  timeout 150 python3 benchmarks/fwd_variants.py --grid anchors --shapes 2 --rounds 11 --rep 40 \
    --check-dtypes bfloat16 --budget 140 --out $OUT/tflops > $OUT/tflops.txt 2>&1
  stamp "tflops rc=$?"; grep '"tflops"' $OUT/tflops.txt | cut -c1-200
  nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv
  bash benchmarks/raw/h100_s42b1/job.sh windows
fi
