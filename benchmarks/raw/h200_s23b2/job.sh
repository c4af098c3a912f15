#!/usr/bin/env bash
# Session 23 B2, about 480 s (issues 14, 16): (1) the backward's kernels one by one on grid
# shapes (bwd_parts.py: what the 1k shapes pay beside the main kernel); then next_s23/job_a.sh:
# (2) the window + key-padding mask rows with both backward kinds; (3) the portable family's
# ALiBi forward against the Hopper one at head dim 64 in alternating processes; (4) the Hopper
# forward's ALiBi at head dim 64 under Nsight Compute beside the plain kernel.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s23b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 90 python3 benchmarks/raw/h200_s23b2/bwd_parts.py > $W/bwd_parts.txt 2>&1
stamp "bwd_parts rc=$?"; cut -c1-120 $W/bwd_parts.txt
timeout 110 python3 benchmarks/masks.py --budget 100 --shape 4,16,4,4096,128 \
  --only window_causal_1024_boolpad,window_2sided_512_boolpad --bwd-kinds hopper,split \
  --out $W/masks_winpad.csv > $W/masks_winpad.txt 2>&1
stamp "masks window+pad rc=$?"; grep -E "check|name=|^kinds|Error|failed" $W/masks_winpad.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-300
for run in hop1 port1 hop2 port2; do
  fam=""; [ "${run#port}" != "$run" ] && fam=portable
  FLASHGEN_FWD_FAMILY=$fam timeout 45 python3 benchmarks/masks.py --budget 38 --no-check --dirs fwd \
    --shape 4,32,8,4096,64 --only alibi_full,alibi_causal --out $W/masks_alibi_$run.csv > $W/masks_alibi_$run.txt 2>&1
  stamp "masks alibi $run rc=$?"; grep -E "name=|Error|failed" $W/masks_alibi_$run.txt | sed -E 's/ (b|hq|hkv|tflops|plain_tflops|pairs_frac)=[^ ]*//g' | cut -c1-240
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 120 $NCU --clock-control none --set full --import-source no -k regex:attn_fwd_ws -c 4 \
  -o $W/alibi_d64 python3 benchmarks/hopper_profile.py run d64_4k d64_4k_alibi d64_4k_causal \
  d64_4k_causal_alibi > $W/ncu_alibi.log 2>&1
stamp "ncu alibi rc=$?"
for r in $W/*.ncu-rep; do
  $NCU -i $r --page details --csv > ${r%.ncu-rep}.details.csv 2>/dev/null; rm -f $r
done
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Registers Per Thread|Executed Ipc Active|No Eligible" $W/*.details.csv | cut -c1-220
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
