#!/usr/bin/env bash
# Session 13, batch B2 (issue 16): masked_tiles.py, each masked kernel per config (windows in
# the Hopper forward through a plan, mask tensors in the portable forward, both backward
# kernels), after B1 found the forward's mask tile waited for at the top of every step.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 400 python3 benchmarks/masked_tiles.py --budget 370 --workers 14 --out $W > $W/masked_tiles.txt 2>&1
stamp "masked tiles rc=$?"; grep -v Warn $W/masked_tiles.txt | cut -c1-400
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
