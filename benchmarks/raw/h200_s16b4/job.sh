#!/usr/bin/env bash
# Session 16, batch B4 (issues 15, 16): the whole GPU suite on this tree (two-launch backward,
# key-padding outputs without fills, the context retry, _PlainAttention, bwd.backward_plain);
# host_steps.py --backward (the general and the plain autograd node in one process);
# host_time.py this tree against old_tree/ (1e217fb, the session's start) new/old/new; masks.py's
# bool key-padding row (and key lengths, right, full, its unchanged reference) new/old/new.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 250 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -3 $W/pytest_gpu.txt | cut -c1-300; grep -E "^FAILED" $W/pytest_gpu.txt | head
for d in 64 128; do
  timeout 70 python3 benchmarks/host_steps.py --backward --shape 1,1,128,$d --calls 1000 > $W/host_bwd_d$d.txt 2>&1
  stamp "host_steps bwd d$d rc=$?"; cat $W/host_bwd_d$d.txt
done
for d in 64 128; do
  for r in new1 old new2; do
    if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
    PYTHONPATH=$PP timeout 30 python3 benchmarks/host_time.py --label s16b4_$r --shape 1,1,128,$d --rounds 7 --calls 150 --out $W/host_${d}_$r.json > $W/host_${d}_$r.txt 2>&1
    stamp "host $d $r rc=$?"; head -8 $W/host_${d}_$r.txt | tail -7
  done
done
for r in new1 old new2; do
  if [ $r = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 60 python3 benchmarks/masks.py --only attn_mask_bool_pad,pad_right_full --budget 45 --out $W/masks_$r.csv > $W/masks_$r.txt 2>&1
  stamp "masks $r rc=$?"; grep -E "check|name=|Error" $W/masks_$r.txt | cut -c1-330
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
