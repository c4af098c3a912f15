#!/usr/bin/env bash
# Prepared in session 20 for the next session, about 570 s (issues 14, 16): the split kind's
# Hopper dK/dV kernel against the portable one now that it no longer spills (session 19 B3 had it
# 0.86-0.99x causal and level at head dim 64, which keep the portable kernel: hopper_bwd.DKDV_AUTO;
# the deterministic mode runs this kind), then every masks.py row against the unmasked call whose
# backward sped up in session 20 (masked backwards still run the split kind), and the length
# and key-padding rows with FLASHGEN_BWD_KIND=hopper (the hopper kind's renderings with lengths
# and with a key-padding mask, new: job_a's GPU tests check them first).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s21/job_b.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 220 python3 benchmarks/bwd_hybrid.py --out $W --budget 150 --rep 25 > $W/bwd_hybrid.txt 2>&1
stamp "bwd_hybrid rc=$?"; grep -E '"ok": false|checks:|Error' $W/bwd_hybrid.txt | head -8 | cut -c1-300
python3 - $W/bwd_hybrid.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r["rows"]:
    print(row["shape"], "causal" if row["causal"] else "full", "speedup", row.get("dkdv_speedup"))
PY
timeout 230 python3 benchmarks/masks.py --budget 210 --out $W/masks.csv > $W/masks.txt 2>&1
stamp "masks rc=$?"; grep -E "check|name=|Error|failed" $W/masks.txt | cut -c1-330
# the length rows again with the hopper kind's lengths rendering (opt-in; GPU-tested in job_a)
FLASHGEN_BWD_KIND=hopper timeout 150 python3 benchmarks/masks.py --budget 130 \
  --only pad_right_full,pad_right_causal,pad_left_full,pad_left_causal,attn_mask_bool_pad,attn_mask_add_pad --out $W/masks_hopper_bwd.csv > $W/masks_hopper_bwd.txt 2>&1
stamp "masks hopper bwd rc=$?"; grep -E "check|name=|Error|failed" $W/masks_hopper_bwd.txt | cut -c1-330
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
