#!/usr/bin/env bash
# Prepared in session 37, not run (its device time was spent).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b1/job.sh         (carrying .whl; ~400-550 s)
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s38b1/job.sh speed   (~300 s)
# default: the whole GPU suite on session 37's final tree (its B3 run was stopped by the job's
#   380 s limit at about 81%, no failure up to there; B4, B6 and B8 ran every kernel test file,
#   tests/compile and tests/runtime: 246, 261 and 70 passed).
# speed: what session 37's output layout (flashgen/kernels/layout.py: the forward's output dense
#   in q's dimension order, as SDPA's, so a model's transpose back is a view) gives the
#   hand-written models, whose sites are replaced forward and backward: examples/backend_speed.py
#   (nanoGPT-style GPT with q/k/v split from one projection, Llama with repeat_interleave;
#   batch 4, width 1024, head dim 64, 2k and 4k tokens, five alternating readings), the tree
#   before session 37 ("old": session37.patch, `git diff 45b6f32 <session 37's last kernel
#   commit> -- flashgen templates`, reversed; it also holds the mask-interior step, which these
#   graphs without a mask tensor do not run) and this one, each twice in alternating processes.
#   Then llama_block.py's replaced inference block (session 37: 1.016-1.024x Inductor) once more.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = speed ]; then
  mkdir -p old_tree && cp -r flashgen templates tuning_db pyproject.toml old_tree/
  (cd old_tree && patch -s -p1 -R < ../benchmarks/raw/h200_s38b1/session37.patch) || { echo "patch failed"; exit 1; }
  ROOT=$PWD
  for run in old1 new1 old2 new2; do
    tree=$ROOT; case $run in old*) tree=$ROOT/old_tree;; esac
    (cd examples && PYTHONPATH=/tmp/site:$tree TORCHINDUCTOR_CACHE_DIR=/tmp/ic_$run timeout 130 \
      python3 backend_speed.py --styles gpt,llama_repeat --seqs 2048,4096 --rounds 5 \
      --json $W/speed_$run.json > $W/speed_$run.txt 2>&1)
    stamp "$run rc=$?"; grep -E "replaced=" $W/speed_$run.txt | cut -c1-250
  done
  timeout 60 python3 benchmarks/llama_block.py --rounds 11 --rep 20 --inference --batch 4 \
    --seq 4096 --width 2048 --out $W/infer_4k.json > $W/infer_4k.txt 2>&1
  stamp "infer_4k rc=$?"; grep -E "^fwd|^check" $W/infer_4k.txt | cut -c1-220
  cd $W && tar czf $OUT/speed.tgz . && exit 0
fi
timeout 560 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $OUT/suite.txt 2>&1
stamp "suite rc=$?"; tail -3 $OUT/suite.txt; grep -E "^FAILED|^ERROR" $OUT/suite.txt | head -20
