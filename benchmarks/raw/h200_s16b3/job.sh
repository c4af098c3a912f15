#!/usr/bin/env bash
# Session 16, batch B3 (issues 15, 16): the whole GPU suite on this tree (the dQ kernel that
# computes delta, key-padding outputs without fills); host_time.py at 1x1x128x64 and
# 1x1x128x128, this tree and old_tree/ (1e217fb, the session's start) alternated new/old/new;
# host_steps.py --backward on this tree.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300; grep -E "^FAILED" $W/pytest_gpu.txt | head
for d in 64 128; do
  for r in new1 old new2; do
    if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
    PYTHONPATH=$PP timeout 30 python3 benchmarks/host_time.py --label s16b3_$r --shape 1,1,128,$d --rounds 7 --calls 150 --out $W/host_${d}_$r.json > $W/host_${d}_$r.txt 2>&1
    stamp "host $d $r rc=$?"; head -8 $W/host_${d}_$r.txt | tail -7
  done
done
timeout 60 python3 benchmarks/host_steps.py --backward --shape 1,1,128,128 --calls 1000 > $W/host_bwd_d128.txt 2>&1
stamp "host_steps bwd rc=$?"; cat $W/host_bwd_d128.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
