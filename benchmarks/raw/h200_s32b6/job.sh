#!/usr/bin/env bash
# Session 32 B6 (issue 13: what limits head dim 128, 16k, non-causal short of 650 TFLOP/s), about
# 150 s, carrying .whl. Nsight Compute (full set, clocks not locked) on the forward as the run
# time picks it (the shipped record: persistent, late_wait; the GQA row's last round split by
# tail_split) and on cuDNN's kernel for the same shapes, MHA 16/16 and GQA 32/8, in one process
# (benchmarks/hopper_profile.py); the same command as session 1's profile (RESULTS "Hopper
# forward: profile"), whose kernel has changed since.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s32b6/job.sh; results in $OUT/b6.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 $NCU --clock-control none --set full -k regex:'attn_fwd_ws|sdpa|fmha|cudnn' -c 6 -o $W/prof \
  python3 benchmarks/hopper_profile.py run d128_16k_shipped cudnn_d128_16k d128_16k_gqa_shipped \
  cudnn_d128_16k_gqa > $W/ncu.log 2>&1
stamp "ncu rc=$?"; grep -v "^==PROF==" $W/ncu.log | tail -5
$NCU -i $W/prof.ncu-rep --csv --page details > $W/ncu_details.csv 2>&1
$NCU -i $W/prof.ncu-rep --csv --page raw 2>/dev/null | gzip > $W/ncu_raw.csv.gz
rm -f $W/prof.ncu-rep
python3 - $W/ncu_details.csv <<'P'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = ("Duration", "Compute (SM) Throughput", "Issue Slots Busy", "Executed Ipc Active",
        "Warp Cycles Per Issued Instruction", "Registers Per Thread", "Dynamic Shared Memory Per Block",
        "Grid Size", "Achieved Occupancy", "No Eligible")
for r in rows:
    if r.get("Metric Name") in want:
        print(r["ID"], r["Kernel Name"][:40], "|", r["Metric Name"], "=", r["Metric Value"], r["Metric Unit"])
P
cd $W && tar czf $OUT/b6.tgz .
