#!/usr/bin/env bash
# Session 37 B4: the output layout (f65f0a9) in HF Llama training, against the tree before it.
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s37b4/job.sh      (carrying .whl)
# 1. The GPU tests B3's cut suite may not have reached: the layout tests, the Hopper forward's
#    split last round in both layouts, the forward, decode, compile and runtime tests.
# 2. examples/train_hf_llama.py --compile-scope model (README's figures: 8 layers, hidden 2048,
#    GQA 16/4, head dim 128), one process per (shape, backend, tree), sharing the GPU through a
#    lock (compiled together, timed alone), each with its own Inductor cache: at 2 x 4096
#    Inductor and flashgen old/new, at 1 x 16384 eager and flashgen old/new. "old" is this tree
#    with layout.patch (git diff 45b6f32 f65f0a9 -- flashgen templates) reversed: the same
#    code without the output layout (and without the interior mask step, which these graphs,
#    with no mask tensor, do not run).
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 \
  tests/kernels/test_out_layout.py tests/kernels/test_hopper.py tests/kernels/test_forward.py \
  tests/kernels/test_decode.py tests/kernels/test_aligned.py tests/compile tests/runtime > $W/tests.txt 2>&1
stamp "tests rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
(cd old_tree && patch -s -p1 -R < ../benchmarks/raw/h200_s37b4/layout.patch) || { echo "patch failed"; exit 1; }
grep -c "new_out" old_tree/flashgen/kernels/fwd.py
export TORCHINDUCTOR_COMPILE_THREADS=4
ROOT=$PWD; cd examples
for job in "4k 2x4096 inductor new" "4k 2x4096 flashgen new" "4k 2x4096 flashgen old" \
           "16k 1x16384 eager new" "16k 1x16384 flashgen new" "16k 1x16384 flashgen old"; do
  set -- $job; name=llama_$1_$3_$4
  tree=$ROOT; [ "$4" = old ] && tree=$ROOT/old_tree
  PYTHONPATH=/tmp/site:$tree TORCHINDUCTOR_CACHE_DIR=/tmp/ic_$name timeout -s INT -k 3 330 \
    python3 train_hf_llama.py --compile-scope model --shapes $2 --steps 8 --warmup 2 --backends $3 \
    --gpu-lock /tmp/s37b4.lock --json $W/$name.json > $W/$name.log 2>&1 &
done
wait
stamp "training done"
for f in $W/llama_*.log; do echo "== $(basename $f)"; grep -E "^ +[0-9]+x[0-9]+ " $f | tail -1; done
cd $W && tar czf $OUT/b4.tgz .
