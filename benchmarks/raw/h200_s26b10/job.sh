#!/usr/bin/env bash
# Prepared in session 26 as B10 (issue 15; not run then), about 350 s: the shipped backward
# records' SDPA comparison redone with what the run time now launches (recompare.py --direction
# bwd: the hopper backward kind where bwd_kind.auto_hopper takes it; all 12 records named cuDNN
# on 2026-12-01, when flashgen's backward was 0.71-0.90x cuDNN's), then the grid through the op
# with those records against every SDPA backend (vendor_grid.py; issue 15's bar: every shape
# >= 1.0x the fastest SDPA backend). The new records file comes back as $OUT/nvidia-h200.json:
# commit it only if the grid holds.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b10/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json --out $OUT/nvidia-h200.json --json $W/recompare.json --direction bwd --rounds 3 --rep 40 > $W/recompare.txt 2>&1
stamp "recompare rc=$?"; grep -v Warn $W/recompare.txt | tail -16
[ -s $OUT/nvidia-h200.json ] && cp $OUT/nvidia-h200.json tuning_db/nvidia-h200.json
timeout 190 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient --rounds 2 --rep 10 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
stamp "vendor grid rc=$?"; grep -v Warn $W/vendor_grid.txt | tail -30
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
