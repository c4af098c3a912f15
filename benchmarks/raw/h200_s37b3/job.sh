#!/usr/bin/env bash
# Session 37 B3: the forward's output in q's layout (flashgen.kernels.layout).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s37b3/job.sh      (carrying .whl)
# 1. The whole GPU suite (every forward path writes at the output's strides now; the Hopper
#    split last round's merge takes them as arguments: test_hopper's split tests in both layouts).
# 2. llama_block.py as B1 ran it: the compiled inference block at 4 x 4096, width 2048 (B1: the
#    site replaced, 0.967x Inductor, the op's output copied by a clone kernel before the output
#    projection; now a view), the default block (left to PyTorch: a control) and the 4k
#    training block (left to PyTorch: a control).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 380 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20
for run in "infer_4k --inference --batch 4 --seq 4096 --width 2048" "infer_small --inference" \
           "train_4k --batch 4 --seq 4096 --width 2048"; do
  set -- $run; name=$1; shift
  timeout 100 python3 benchmarks/llama_block.py --rounds 11 --rep 20 "$@" --out $OUT/$name.json \
    > $OUT/$name.txt 2>&1
  stamp "$name rc=$?"; grep -E "^fwd|^check|left to|replace " $OUT/$name.txt | cut -c1-220
done
