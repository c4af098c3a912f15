#!/usr/bin/env bash
# Prepared in session 22 for the next session, about 480 s (issue 16): (1) the new window +
# key-padding mask rows (masks.py window_*_boolpad: a sliding window over a padded batch) with
# their float64 checks, then the hopper backward kind against the split kind on them
# (hopper_bwd.AUTO_WINDOW leaves a window with a mask to the split kind until timed); (2) the
# Hopper forward's ALiBi at head dim 64 under Nsight Compute beside the plain kernel (session 22
# B4: 0.65x the unmasked kernel's TFLOP/s, while its SASS has ~17% more instructions, one FFMA a
# score: what else limits it: issue slots, stalls, registers); (3) the portable family's ALiBi
# forward against the Hopper one at head dim 64.
# Then: where the hopper kind wins the boolpad rows, let AUTO_WINDOW take windows with masks;
# where the portable ALiBi forward wins at head dim 64, keep ALiBi at 64 out of the Hopper
# family's AUTO_MASKS.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s23/job_a.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 110 python3 benchmarks/masks.py --budget 100 --shape 4,16,4,4096,128 \
  --only window_causal_1024_boolpad,window_2sided_512_boolpad --bwd-kinds hopper,split \
  --out $W/masks_winpad.csv > $W/masks_winpad.txt 2>&1
stamp "masks window+pad rc=$?"; grep -E "check|name=|^kinds|Error|failed" $W/masks_winpad.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-300
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --clock-control none --set full --import-source no -k regex:attn_fwd_ws -c 4 \
  -o $W/alibi_d64 python3 benchmarks/hopper_profile.py run d64_4k d64_4k_alibi d64_4k_causal \
  d64_4k_causal_alibi > $W/ncu_alibi.log 2>&1
stamp "ncu alibi rc=$?"
for r in $W/*.ncu-rep; do
  $NCU -i $r --page details --csv > ${r%.ncu-rep}.details.csv 2>/dev/null; rm -f $r
done
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Registers Per Thread|Executed Ipc Active|No Eligible" $W/*.details.csv | cut -c1-220
# (3) which family's ALiBi forward is faster at head dim 64: the portable family's plain
# kernel read level with the Hopper one there (B4: 1.132 against 1.133 ms), its ALiBi kernel
# was never timed at 64 (hopper.AUTO_MASKS takes ALiBi at both head dims from session 9's
# head dim 128 reading); alternating processes, default (hopper) / portable / default / portable
for run in hop1 port1 hop2 port2; do
  fam=""; [ "${run#port}" != "$run" ] && fam=portable
  FLASHGEN_FWD_FAMILY=$fam timeout 45 python3 benchmarks/masks.py --budget 38 --no-check --dirs fwd \
    --shape 4,32,8,4096,64 --only alibi_full,alibi_causal --out $W/masks_alibi_$run.csv > $W/masks_alibi_$run.txt 2>&1
  stamp "masks alibi $run rc=$?"; grep -E "name=|Error|failed" $W/masks_alibi_$run.txt | sed -E 's/ (b|hq|hkv|tflops|plain_tflops|pairs_frac)=[^ ]*//g' | cut -c1-240
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
