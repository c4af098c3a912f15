#!/usr/bin/env bash
# Session 10, batch B3 (issue 15): where the host time of forward-with-grad and of the backward
# goes (host_profile.py --grad / --backward, cProfile, hd64 and hd128), and the Llama block
# (llama_block.py) with the records recompared in B2 (the tuning_db/nvidia-h200.json committed after B2).
set -u
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/work; mkdir -p $W
for shape in 1,1,128,64 1,1,128,128; do
  for mode in --grad --backward; do
    timeout 40 python3 benchmarks/host_profile.py --shape $shape $mode --calls 3000 --top 45 > $W/prof_${shape//,/x}$mode.txt 2>&1
    stamp "profile $shape $mode rc=$?"
  done
done
timeout 150 python3 benchmarks/llama_block.py --rounds 7 --rep 20 --out $W/llama_block.json > $W/llama_block.txt 2>&1
stamp "llama block rc=$?"; grep -v Warn $W/llama_block.txt | tail -12
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
