#!/usr/bin/env bash
# Prepared in session 30 (issues 15, 16; not run: no device time left), about 560 s. Run as
# bash benchmarks/raw/next_s31/job.sh carrying .whl; results straight under $OUT (file names
# without commas: the device tool refuses them).
# 1. The GPU suite on the tree that took softcap and ALiBi off late_wait (hopper.LATE_WAIT_OFF).
# 2. Dropout's forward with and without the records' late_wait (session 30 B7 measured softcap,
#    ALiBi, a window and a key mask, not dropout).
# 3. Every masks.py row, forward and forward+backward, head dim 128 (the issue-16 table).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/gpu_suite.txt 2>&1
stamp "gpu suite rc=$?"; tail -3 $OUT/gpu_suite.txt; grep -E "^FAILED" $OUT/gpu_suite.txt | head
python3 -c "
import json; d=json.load(open('tuning_db/hopper/nvidia-h200.json'))
for r in d['records']: r['config'].pop('late_wait', None)
json.dump(d, open('/tmp/noL.json','w'))"
for V in L noL; do
  if [ $V = noL ]; then export FLASHGEN_HOPPER_CONFIGS=/tmp/noL.json; fi
  timeout 40 python3 benchmarks/masks.py --no-check --dirs fwd --rounds 3 --budget 25 \
    --only dropout_full,dropout_causal --shape 4,16,4,4096,128 --out $OUT/dropout_$V.csv > $OUT/dropout_$V.txt 2>&1
  stamp "dropout $V rc=$?"; grep -E "^name=" $OUT/dropout_$V.txt | cut -c1-200
done
unset FLASHGEN_HOPPER_CONFIGS
timeout 200 python3 benchmarks/masks.py --no-check --dirs fwd,fwd+bwd --rounds 3 --budget 180 \
  --shape 4,16,4,4096,128 --out $OUT/masks_d128.csv > $OUT/masks_d128.txt 2>&1
stamp "masks d128 rc=$?"; grep -E "^name=|budget" $OUT/masks_d128.txt | cut -c1-330
