#!/usr/bin/env bash
# Session 15, batch B5 (issue 15): host time of a launch-bound call with the plain path's own
# launcher (fwd.forward_plain, this tree) against old_tree/ (5603655), alternated new/old/new
# at head dim 128, new at 64; then host_steps.py on this tree.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 60 python3 benchmarks/host_time.py --label s15b5_$r --shape 1,1,128,128 --rounds 9 --out $W/host_128_$r.json > $W/host_128_$r.txt 2>&1
  stamp "host 128 $r rc=$?"; head -3 $W/host_128_$r.txt
done
timeout 60 python3 benchmarks/host_time.py --label s15b5_new --shape 1,1,128,64 --rounds 9 --out $W/host_64_new.json > $W/host_64_new.txt 2>&1
stamp "host 64 rc=$?"; head -8 $W/host_64_new.txt
timeout 60 python3 benchmarks/host_steps.py --shape 1,1,128,128 > $W/steps_128.txt 2>&1
stamp "steps rc=$?"; cat $W/steps_128.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
