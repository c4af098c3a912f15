#!/usr/bin/env bash
# Session 35 B10 (issue 15), about 70 s, carrying .whl; part 1 of next_s36/job.sh's first call
# (the session's device time had room for it alone), run as one command:
#   . benchmarks/device_env.sh; timeout 120 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json \
#     --out $OUT/nvidia-h200.json --json $W/recompare.json --direction fwd --rounds 3 --rep 40
# Output: recompare.txt / .json and the redone records (nvidia-h200.recompared.json, not installed).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 120 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json --out $OUT/nvidia-h200.json \
  --json $W/recompare.json --direction fwd --rounds 3 --rep 40 > $W/recompare.txt 2>&1
