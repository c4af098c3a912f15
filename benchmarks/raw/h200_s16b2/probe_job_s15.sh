#!/usr/bin/env bash
# Prepared in session 15 (no device time left), for the next session: does the split backward's
# overlap (dQ on a second stream) fail in the processes whose side stream shares the current
# stream's hardware queue? overlap_probe.py in one process per shift K (pool streams drawn
# before the first backward), then two with CUDA_DEVICE_MAX_CONNECTIONS=32. If the slow reading
# (~4.07 ms, the overlap-off time) follows K, pick the side stream so it cannot share the
# queue (flashgen/kernels/streams.py). Run as FLASHGEN_COMMIT=<sha> bash <this>, carrying .whl;
# move it to benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
for K in 0 1 2 3 4 5 6 7 8 9; do
  timeout 40 python3 benchmarks/overlap_probe.py --shift $K --reps 3 > $W/probe_$K.txt 2>&1
  stamp "shift $K rc=$?"; tail -1 $W/probe_$K.txt | cut -c1-200
done
for K in 0 3; do
  CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 40 python3 benchmarks/overlap_probe.py --shift $K --reps 3 > $W/probe_c32_$K.txt 2>&1
  stamp "connections 32 shift $K rc=$?"; tail -1 $W/probe_c32_$K.txt | cut -c1-200
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
