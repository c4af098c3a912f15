#!/usr/bin/env bash
# masks.py on two trees of this repository, alternating (issue 16's A/B of a template change).
#   bash benchmarks/masks_ab.sh OLD_ROOT NEW_ROOT OUT_DIR ROWS [SHAPE] [REPS]
# ROWS: masks.py's --only list; SHAPE: its --shape (default 4,16,4,4096,128); REPS: old/new
# pairs (default 2). Each run is its own process (both trees are packages named flashgen):
# forward and forward+backward, three readings each, the new tree's first run also checking
# against float64. Writes OUT_DIR/masks_{old,new}_N.{csv,txt} and prints each run's rows.
# Needs the device's environment (benchmarks/device_env.sh sourced: PYTHONPATH's /tmp/site).
set -u
old=$1 new=$2 out=$3 rows=$4 shape=${5:-4,16,4,4096,128} reps=${6:-2}
t0=${t0:-$(date +%s)}
for rep in $(seq 1 "$reps"); do
  for tree in old new; do
    root=$old; [ $tree = new ] && root=$new
    check=--no-check; [ $tree$rep = new1 ] && check=
    PYTHONPATH=/tmp/site:$root timeout 80 python3 benchmarks/masks.py $check --dirs fwd,fwd+bwd \
      --rounds 3 --budget 70 --shape "$shape" --only "$rows" \
      --out "$out/masks_${tree}_$rep.csv" > "$out/masks_${tree}_$rep.txt" 2>&1
    echo "[$(( $(date +%s) - t0 )) s] $tree $rep rc=$?"
    grep -h "^name=\|^check\|failed" "$out/masks_${tree}_$rep.txt" \
      | sed 's/ b=[0-9].*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//' | cut -c1-200
  done
done
