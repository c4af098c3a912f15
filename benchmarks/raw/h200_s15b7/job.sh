#!/usr/bin/env bash
# Session 15, batch B7 (issue 15, all): the whole GPU suite on this tree; then host_time.py at
# 1x1x128x64, this tree and old_tree/ (5603655, before fwd.forward_plain) alternated new/old/new,
# to check B5's forward+backward reading (481.8 us in one process) against the old tree.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300; grep -E "^FAILED" $W/pytest_gpu.txt | head
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 30 python3 benchmarks/host_time.py --label s15b7_$r --shape 1,1,128,64 --rounds 7 --calls 150 --out $W/host_64_$r.json > $W/host_64_$r.txt 2>&1
  stamp "host 64 $r rc=$?"; head -7 $W/host_64_$r.txt
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
