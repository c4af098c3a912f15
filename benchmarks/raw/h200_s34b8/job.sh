#!/usr/bin/env bash
# Session 34 B8 (issue 16), run as one command line on B7's warm machine, carrying .whl, on
# a2d6435 with PINGPONG_OFF = ("softcap", "alibi") (committed after it):
#   . benchmarks/device_env.sh; W=$OUT/work; mkdir -p $W
#   timeout 80 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 5 --budget 70 \
#     --shape 4,16,4,4096,128 --only softcap_causal,softcap_full,alibi_full --out $W/softcap.csv
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 80 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 5 --budget 70 \
  --shape 4,16,4,4096,128 --only softcap_causal,softcap_full,alibi_full --out $W/softcap.csv > $W/softcap.txt 2>&1
