#!/usr/bin/env bash
# Session 18 B1: the Hopper forward with half its exp2 on the FMA units (EXP_EMU, template
# EXP2_PAIR) against the MUFU-only kernel, alternating in one process, checked against float64
# (benchmarks/exp_emu.py; issue 16's softcap row, issue 13's hd128 16k); then where the auto
# path's host time goes on a launch-bound call (host_profile.py, auto and forced; issue 15).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s18b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 380 python3 benchmarks/exp_emu.py --rounds 3 --out $W/exp_emu.jsonl > $W/exp_emu.txt 2>&1
stamp "exp_emu rc=$?"; grep -v Warn $W/exp_emu.txt | python3 -c '
import sys, json
for line in sys.stdin:
    if not line.startswith("{"): print(line.rstrip()[:300]); continue
    r = json.loads(line)
    errs = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in r.items() if k.startswith(("err", "nan"))}
    print(r["name"], "emu0", r["emu0_tflops"], "emu1", r["emu1_tflops"], "x%.3f" % r["speedup_emu"], "cudnn", r.get("cudnn_tflops"), errs)
'
for impl in "" flashgen; do
  timeout 60 python3 benchmarks/host_profile.py --impl "$impl" --calls 5000 --top 25 > $W/host_profile_${impl:-auto}.txt 2>&1
  stamp "host_profile ${impl:-auto} rc=$?"; head -40 $W/host_profile_${impl:-auto}.txt | cut -c1-160
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
