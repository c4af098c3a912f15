#!/usr/bin/env bash
# Session 15, batch B4 (issues 15, 16): host time step by step under a launch-bound call
# (host_steps.py, head dims 128 and 64); then masks.py's bool key-padding row in four processes,
# two with the backward's dQ/dK-dV overlap on (default) and two off, to see whether its
# forward+backward's two modes (3.69 / 4.05 ms, B3) come from the overlap.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
for shape in 1,1,128,128 1,1,128,64; do
  timeout 60 python3 benchmarks/host_steps.py --shape $shape > $W/steps_${shape//,/x}.txt 2>&1
  stamp "steps $shape rc=$?"; cat $W/steps_${shape//,/x}.txt
done
for r in on1 off1 on2 off2; do
  case $r in on*) OV=;; off*) OV=0;; esac
  FLASHGEN_BWD_OVERLAP=$OV timeout 100 python3 benchmarks/masks.py --only attn_mask_bool_pad --budget 60 --out $W/masks_$r.csv > $W/masks_$r.txt 2>&1
  stamp "masks $r rc=$?"; grep -E "dir=fwd\+bwd|Error" $W/masks_$r.txt | cut -c1-330
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
