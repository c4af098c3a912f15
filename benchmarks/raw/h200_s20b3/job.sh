#!/usr/bin/env bash
# Session 20, batch B3 (issues 14, 15): the Hopper backward kernel (attn_bwd_ws, shipped config)
# under Nsight Compute at B4 H16 4k d128 bf16, not causal and causal, and cuDNN's backward
# kernel beside it (why causal costs 0.74 of non-causal; what limits the non-causal kernel);
# then host_time.py's launch-bound forward+backward on this tree and on session 18's last tree
# (old_tree, 4ed22a0), alternated twice (did session 19 add host time to forward+backward?).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in full causal; do
  FLASHGEN_BWD_KIND=hopper timeout 150 $NCU --clock-control none --set full --import-source no \
    --kernel-name regex:attn_bwd_ws --launch-skip 2 --launch-count 1 -o $W/ours_$mode \
    python3 benchmarks/raw/h200_s20b3/ncu_bwd.py $mode > $W/ncu_ours_$mode.log 2>&1
  stamp "ncu ours $mode rc=$?"
done
timeout 120 $NCU --clock-control none --set full --kernel-name regex:bprop \
  --launch-skip 2 --launch-count 1 -o $W/cudnn_full \
  python3 benchmarks/raw/h200_s20b3/ncu_bwd.py full cudnn > $W/ncu_cudnn_full.log 2>&1
stamp "ncu cudnn rc=$?"; grep "Profiling" $W/ncu_*.log | cut -c1-200
for r in $W/*.ncu-rep; do
  base=${r%.ncu-rep}
  $NCU -i $r --page details --csv > $base.details.csv 2>/dev/null
  $NCU -i $r --page raw --csv | gzip > $base.raw.csv.gz 2>/dev/null
  $NCU -i $r --page source --csv --print-source sass | gzip > $base.src_sass.csv.gz 2>/dev/null
  rm -f $r
done
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|No Eligible|L2 Hit Rate|DRAM Throughput|Local" $W/*.details.csv | cut -c1-220
for r in 1 2; do
  for tree in new old; do
    if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
    PYTHONPATH=$PP timeout 50 python3 benchmarks/host_time.py --label $tree --shape 1,1,128,64 --rounds 9 --out $W/host_${tree}_$r.json > $W/host_${tree}_$r.txt 2>&1
    stamp "host $tree $r rc=$?"; grep -E "^\s+(fwd|fwd_grad|fwd_bwd|bwd) " $W/host_${tree}_$r.txt
  done
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
