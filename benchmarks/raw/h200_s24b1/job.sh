#!/usr/bin/env bash
# Session 24, batch B1 (issue 14), about 520 s: the spill-free Hopper backward under Nsight
# Compute (shipped config; head dim 128 full and causal, head dim 64 full, the grid's worst
# shape) with cuDNN's head dim 64 backward kernel beside it (session 20 B3 has its head dim 128
# one); then session 23's persistent-grid A/B in five alternating rounds (prepared as
# next_s24/job_b.sh: if persistent holds >= 2% without causal masking, CONFIGS gets a causal key).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s24b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
D=benchmarks/raw/h200_s24b1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for run in "full 128" "causal 128" "full 64"; do
  set -- $run
  FLASHGEN_BWD_KIND=hopper timeout 100 $NCU --clock-control none --set full --import-source no \
    --kernel-name regex:attn_bwd_ws --launch-skip 2 --launch-count 1 -o $W/ours_$1_d$2 \
    python3 $D/ncu_bwd.py $1 $2 > $W/ncu_ours_$1_d$2.log 2>&1
  stamp "ncu ours $1 d$2 rc=$?"
done
timeout 100 $NCU --clock-control none --set full --kernel-name regex:bprop \
  --launch-skip 2 --launch-count 1 -o $W/cudnn_full_d64 \
  python3 $D/ncu_bwd.py full 64 cudnn > $W/ncu_cudnn_full_d64.log 2>&1
stamp "ncu cudnn d64 rc=$?"; grep "Profiling\|==PROF==\|Error" $W/ncu_*.log | cut -c1-200
for r in $W/*.ncu-rep; do
  base=${r%.ncu-rep}
  $NCU -i $r --page details --csv > $base.details.csv 2>/dev/null
  $NCU -i $r --page raw --csv | gzip > $base.raw.csv.gz 2>/dev/null
  $NCU -i $r --page source --csv --print-source sass | gzip > $base.src_sass.csv.gz 2>/dev/null
  rm -f $r
done
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Grid Size|Block Size|Shared Memory Config|L2 Hit Rate|DRAM Throughput|Local Memory Spilling Requests\"" $W/*.details.csv | cut -c1-220
S=2,2,1,168,1,0,0,1,1,1,0; P=2,2,1,168,1,0,1,1,1,1,0; P3=2,3,1,168,1,0,1,1,1,1,0
timeout 280 python3 benchmarks/hopper_bwd.py --out $W --budget 250 --check-timeout 70 --rounds 5 --rep 25 \
  --configs 64:$S 64:$P 64:$P3 128:$S 128:$P > $W/hopper_bwd.txt 2>&1
stamp "hopper_bwd rc=$?"; grep -E "checks|FAILED|summary|Error|budget" $W/hopper_bwd.txt | cut -c1-900
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
