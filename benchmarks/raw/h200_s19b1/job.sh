#!/usr/bin/env bash
# Prepared in session 18 (its device budget was spent) for the next session, about 400 s: the
# whole GPU suite (session 18's key_hull kernel, hull_kernel.py, ran on the CPU only: Triton's
# interpreter and an sm_90 compile), then that kernel against the torch ops it replaced
# (old_tree = 55bad5e): the key-padding rows of masks.py, forward and forward+backward, one
# process each, new then old. Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s19/job_a.sh
# carrying .whl and old_tree (`git archive 55bad5e flashgen templates`); move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 280 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests > $W/pytest_gpu.txt 2>&1
stamp "pytest gpu rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_gpu.txt | tail -12 | cut -c1-300
ROWS=attn_mask_add_pad,attn_mask_bool_pad
for tree in new old; do
  if [ $tree = old ]; then PP=/tmp/site:$PWD/old_tree:$PWD; else PP=/tmp/site:$PWD; fi
  PYTHONPATH=$PP timeout 45 python3 benchmarks/masks.py --only $ROWS --rounds 2 --no-check --out $W/masks_${tree}.csv > $W/masks_${tree}.txt 2>&1
  stamp "masks $tree rc=$?"; grep -E "name=" $W/masks_${tree}.txt | sed -E 's/ b=4.*pairs_frac=[0-9.]*//' | cut -c1-200
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
