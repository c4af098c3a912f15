#!/usr/bin/env bash
# Session 38 B5 (issue 16: ALiBi at head dim 128), carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b5/job.sh
# The Hopper forward's ALiBi per-key term on the tensor cores with O staged in the Q buffer
# (alibi_mma.patch) against the tree before it (the patch reversed in old_tree/): ALiBi's GPU
# tests on the new tree (the Hopper family forced at head dims 64/128, causal both ways, and
# the default path), then masks.py's ALiBi rows in alternating processes (masks_ab.sh, the new
# tree's first run checking against float64).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
(cd old_tree && patch -s -p1 -R < ../benchmarks/raw/h200_s38b5/alibi_mma.patch) || { echo "patch failed"; exit 1; }
timeout 120 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 4 tests/kernels/test_alibi.py > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|Error" $W/tests.txt | head -5
t0=$(date +%s) bash benchmarks/masks_ab.sh $PWD/old_tree $PWD $W alibi_full,alibi_causal 4,16,4,4096,128 2
cd $W && tar czf $OUT/b5.tgz .
