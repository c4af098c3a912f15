#!/usr/bin/env bash
# Session 58's device plan (no device time was left in session 58; carry .whl;
# FLASHGEN_COMMIT=<sha>). Parts, in the order to run them:
#   autohost: issue 15's host time after 99faa0f (a launch-bound forward alone, left to the op's
#          choice, runs flashgen's forward instead of SDPA's own choice): its GPU test, then
#          host_time.py three times (its auto_fwd row is the one that changed; fwd, fwd_bwd the
#          bars), ~150 s
#   sdpadrop: next_s57/dev.sh sdpadrop (small SDPA calls with dropout and no mask), ~250 s
#   first: next_s56/dev.sh first (on an H200 issue 15's host bars and issue 13's 650 TFLOP/s row;
#          GPU tests; T5)
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-?}
name=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "card: $name"; uptime | cut -c1-80
. benchmarks/device_env.sh > /dev/null 2>&1
for part in "$@"; do
case "$part" in
autohost)
  timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/runtime/test_vendor_host.py \
    > $OUT/autohost_tests.txt 2>&1
  stamp "gpu tests rc=$?"; tail -2 $OUT/autohost_tests.txt | cut -c1-300
  for i in 1 2 3; do
    timeout 100 python3 -u benchmarks/host_time.py --rounds 3 --commit "$FLASHGEN_COMMIT" \
      --out $OUT/host$i.json > $OUT/host$i.txt 2>&1
    stamp "host $i rc=$?"; grep -E "^  (fwd|fwd_bwd|auto_fwd|auto_fwd_bwd) |auto cases" $OUT/host$i.txt
  done ;;
sdpadrop)
  bash benchmarks/raw/next_s57/dev.sh sdpadrop 2>&1 | grep -v "^card\|load average" ;;
first)
  bash benchmarks/raw/next_s56/dev.sh first 2>&1 | grep -v "^card\|load average" ;;
esac
done
