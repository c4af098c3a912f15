#!/usr/bin/env bash
# Prepared in session 36 (issue 15), not run: that session's device time was spent.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s37/job.sh      (carrying .whl; about 150 s)
# 1. The forward's smaller host margin in a compiled inference graph (llama_block.py
#    --inference, new in session 36): at the default block (4 x 2048, width 1024: 16 heads,
#    head dim 64, GQA 16/4, causal) the forward's expected saving is ~3 µs, under the 10 µs
#    margin: the site is left to PyTorch (both sides compile the same graph: a control); at
#    4 x 4096, width 2048 (32 heads, GQA 32/8) the head-dim-64 causal 4k record (1.056x) saves
#    ~21 µs: the site is replaced and runs flashgen's forward, which session 36 B6 read 1.028x
#    cuDNN in eager calls (B4 H32 4k d64 causal). The bar: >= 1.0x Inductor there. The same
#    shape's training graph as a control (the training margin keeps cuDNN both ways: left to
#    PyTorch).
# 2. host_time.py on this machine (the README's host figures are session 32's; session 36 B10
#    read SDPA's forward+backward at 271.5 µs against session 32's 131.6 on another machine).
# Results in $OUT/next.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
for run in "infer_small --inference" "infer_4k --inference --batch 4 --seq 4096 --width 2048" \
           "train_4k --batch 4 --seq 4096 --width 2048"; do
  set -- $run; name=$1; shift
  timeout 150 python3 benchmarks/llama_block.py --rounds 11 --rep 20 "$@" --out $W/$name.json \
    > $W/$name.txt 2>&1
  stamp "$name rc=$?"; grep -E "^fwd|^check|left to|replace " $W/$name.txt | cut -c1-300
done
timeout 120 python3 benchmarks/host_time.py --rounds 5 --out $W/host_time.json > $W/host_time.txt 2>&1
stamp "host_time rc=$?"; grep -v -i warn $W/host_time.txt | tail -20 | cut -c1-200
cd $W && tar czf $OUT/next.tgz .
