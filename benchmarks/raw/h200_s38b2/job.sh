#!/usr/bin/env bash
# Session 38 B2 (issue 16: dropout), carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b2/job.sh
# The Hopper backward's dropout row keys hashed once a tile (rowkeys.patch, this session's commit)
# against the tree before it (the patch reversed in old_tree/): GPU dropout tests on the new
# tree, then masks.py's dropout rows forward and forward+backward in alternating processes
# (benchmarks/masks_ab.sh; head dim 128 twice, head dim 64 GQA once), then host_time.py on this
# machine (issue 15's host bars).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
(cd old_tree && patch -s -p1 -R < ../benchmarks/raw/h200_s38b2/rowkeys.patch) || { echo "patch failed"; exit 1; }
timeout 150 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 4 \
  tests/kernels/test_dropout.py tests/kernels/test_hopper_bwd.py -k "drop or softcap_alibi" > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt
t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W dropout_causal,dropout_full 4,16,4,4096,128 2
mkdir -p $W/d64
t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W/d64 dropout_causal,dropout_full 4,32,8,4096,64 1
timeout 90 python3 benchmarks/host_time.py --rounds 5 > $W/host.txt 2>&1
stamp "host rc=$?"; tail -12 $W/host.txt
cd $W && tar czf $OUT/b2.tgz . 
