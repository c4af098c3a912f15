#!/usr/bin/env bash
# Prepared in session 20 for the next session, about 330 s (issue 14): the spill-free Hopper
# backward under Nsight Compute (what limits it now; session 20 B3's script, its shipped config),
# then the backward's Optuna search with the new knobs (stats_smem, dq_turns) and more trials.
# (Sessions 21-23 did not run it: their device time went to the masked backwards and, in 23, to
# rotate/persistent A/Bs (RESULTS "Session 23"); session
# 22 B4 ran the head dim 64 A/B this job had at its end.)
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s24/job_a.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in full causal; do
  FLASHGEN_BWD_KIND=hopper timeout 100 $NCU --clock-control none --set full --import-source no \
    --kernel-name regex:attn_bwd_ws --launch-skip 2 --launch-count 1 -o $W/ours_$mode \
    python3 benchmarks/raw/h200_s20b3/ncu_bwd.py $mode > $W/ncu_ours_$mode.log 2>&1
  stamp "ncu ours $mode rc=$?"
done
for r in $W/*.ncu-rep; do
  base=${r%.ncu-rep}
  $NCU -i $r --page details --csv > $base.details.csv 2>/dev/null
  $NCU -i $r --page source --csv --print-source sass | gzip > $base.src_sass.csv.gz 2>/dev/null
  rm -f $r
done
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Local Memory Spilling Requests\"" $W/*.details.csv | cut -c1-220
timeout 200 python3 benchmarks/hopper_bwd_tune.py --out $W/hopper_bwd_tune.json --trials 20 \
  --head-dims 64,128 --seqs 4096 --budget 45 > $W/hopper_bwd_tune.txt 2>&1
stamp "tune rc=$?"; grep -v Warn $W/hopper_bwd_tune.txt | cut -c1-400
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
