#!/usr/bin/env bash
# Prepared in session 26 as B9 (issue 14; not run then), about 250 s: the head dim 128 Hopper
# backward with whole dQ products in turns (shipped since session 26) under Nsight Compute, the
# same shapes and method as session 24 B1 (B4 H16 N4096 D128, full and causal, one warm call),
# to compare issue slots, shared wavefronts and stalls with that profile and cuDNN's (session
# 20 B3).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b9/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
D=benchmarks/raw/h200_s24b1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for run in "full 128" "causal 128"; do
  set -- $run
  FLASHGEN_BWD_KIND=hopper timeout 100 $NCU --clock-control none --set full --import-source no \
    --kernel-name regex:attn_bwd_ws --launch-skip 2 --launch-count 1 -o $W/turns_$1_d$2 \
    python3 $D/ncu_bwd.py $1 $2 > $W/ncu_turns_$1_d$2.log 2>&1
  stamp "ncu turns $1 d$2 rc=$?"
done
grep "Profiling\|==PROF==\|Error" $W/ncu_*.log | cut -c1-200
for r in $W/*.ncu-rep; do
  base=${r%.ncu-rep}
  $NCU -i $r --page details --csv > $base.details.csv 2>/dev/null
  $NCU -i $r --page raw --csv | gzip > $base.raw.csv.gz 2>/dev/null
  $NCU -i $r --page source --csv --print-source sass | gzip > $base.src_sass.csv.gz 2>/dev/null
  rm -f $r
done
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Registers Per|Grid Size|Local Memory Spilling Requests\"" $W/*.details.csv | cut -c1-220
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
