#!/usr/bin/env bash
# Session 21 B6 (issue 16), one inline command on the warm machine after B5 (tree 05a8104):
# the narrow causal window rows alternated between the hopper and the split backward kinds,
# two rounds, because B4 and B5 disagreed on window_causal_256 (3% faster, 13% slower).
# Only the first 8 files came back (the run's file count limit): round 2's split output is
# in the command's printed tail, copied into benchmarks/RESULTS.md.
. benchmarks/device_env.sh >/dev/null 2>&1; for i in 1 2; do for kd in hopper split; do FLASHGEN_BWD_KIND=$kd timeout 60 python3 benchmarks/masks.py --budget 50 --no-check --dirs fwd+bwd --only window_causal_256,window_causal_1024 --out $OUT/w_${kd}_$i.csv > $OUT/w_${kd}_$i.txt 2>&1; echo "$kd $i"; grep name= $OUT/w_${kd}_$i.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops|n|d|pairs_frac|dir)=[^ ]*//g'; done; done
