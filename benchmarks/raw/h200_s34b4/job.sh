#!/usr/bin/env bash
# Session 34 B4 (issue 16), about 330 s, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b4/job.sh
# The two family decisions made on older kernels, again: dropout runs the portable forward
# (session 22 B1: the Hopper family 1.9x slower) and ALiBi at head dim 64 too (session 23 B2:
# 1.72 against 1.34 ms full). Each in its own process, default (portable) and
# FLASHGEN_FWD_FAMILY=hopper alternating, twice; masks.py forward only (float64 checks are the
# GPU suite's: B1 passed the forced-family dropout and ALiBi cases).
# Results in $OUT/b4.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
for rep in 1 2; do
  for fam in portable hopper; do
    FLASHGEN_FWD_FAMILY=$fam timeout 80 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 \
      --budget 70 --shape 4,32,8,4096,64 --only dropout_causal,dropout_full,alibi_causal,alibi_full \
      --out $W/d64_${fam}_$rep.csv > $W/d64_${fam}_$rep.txt 2>&1
    stamp "d64 $fam $rep rc=$?"
    FLASHGEN_FWD_FAMILY=$fam timeout 60 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 \
      --budget 50 --shape 4,16,4,4096,128 --only dropout_causal,dropout_full \
      --out $W/d128_${fam}_$rep.csv > $W/d128_${fam}_$rep.txt 2>&1
    stamp "d128 $fam $rep rc=$?"
  done
done
python3 - "$W" <<'PY'
import csv, glob, os, sys
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    d, fam, rep = os.path.basename(path)[:-4].split("_")
    for r in csv.DictReader(open(path)):
        rows.setdefault((d, r["name"]), {}).setdefault(fam, []).append(float(r["flashgen_ms"]))
for (d, name), by in sorted(rows.items()):
    print(d, name, " ".join(f"{f} {by[f]}" for f in sorted(by)))
PY
cd $W && tar czf $OUT/b4.tgz .
