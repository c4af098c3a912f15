#!/usr/bin/env bash
# Session 19 B3: the Hopper backward template's dK/dV alone (COMPUTE_DQ=False) against the
# split kind's portable dK/dV kernel, with float64 checks of dQ (split) + dK/dV (Hopper).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s19b3/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 400 python3 benchmarks/bwd_hybrid.py --out $W --budget 200 --rep 25 > $W/bwd_hybrid.txt 2>&1
stamp "bwd_hybrid rc=$?"; grep -E '"ok": false|checks:|Error' $W/bwd_hybrid.txt | head -8 | cut -c1-300
python3 - $W/bwd_hybrid.json <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r["rows"]:
    ms = row["ms"]
    hop = {k.split()[-1]: v for k, v in ms.items() if k.startswith("hopper")}
    print(row["shape"], "causal" if row["causal"] else "full", "split dkdv", ms["split dkdv"], "dq", ms["split dq"], "hopper", hop, "speedup", row.get("dkdv_speedup"), row.get("vs_cudnn"), "diff", row["diff"])
PY
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
