#!/usr/bin/env bash
# Session 46's second call (either card): the GPU test that failed on the H100 (capture routing,
# fixed in 8a9f149) with its file; the body probe; bwd_thread.py with the process pinned to one
# core (taskset) and to two, against unpinned: is the device thread's slower Python a cold core?
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu tests/kernels/test_launch_gpu.py > $OUT/launch_gpu.txt 2>&1
stamp "launch_gpu rc=$?"; tail -2 $OUT/launch_gpu.txt; grep -E "^FAILED|^ERROR" $OUT/launch_gpu.txt | head
timeout 100 python3 -u benchmarks/raw/next_s46/body_probe.py $OUT/body.json > $OUT/body.txt 2>&1
stamp "body rc=$?"; cat $OUT/body.txt
for pin in none 3 3,5; do
  pre=; [ $pin != none ] && pre="taskset -c $pin"
  timeout 100 $pre python3 -u benchmarks/bwd_thread.py --rounds 5 --out $OUT/bwd_thread_pin$pin.json > $OUT/bwd_thread_pin$pin.txt 2>&1
  stamp "bwd_thread pin=$pin rc=$?"; cat $OUT/bwd_thread_pin$pin.txt
done
