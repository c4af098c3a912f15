# Session 54: the flat launch of a masked route (701e4fc) against the tree before it (old_tree/ =
# git archive 81a8b43, carried): first the GPU tests of the routes (the flat launch's own test
# among them), the masks and the launches; then host time with the GPU busy
# (next_s52/host_sleep.py: the ops at ModernBERT's shape, then the compiled ModernBERT, 2
# rounds), each arm run from inside its own tree, alternating old / new / old / new.
. benchmarks/device_env.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
  tests/kernels/test_attn_mask.py tests/kernels/test_launch_gpu.py > $OUT/gpu_flat.txt 2>&1
stamp "gpu tests rc=$?"; tail -3 $OUT/gpu_flat.txt | cut -c1-300
grep -E "FAILED|Error" $OUT/gpu_flat.txt | head -10 | cut -c1-300
root=$PWD
for i in 1 2; do for t in old new; do
  if [ $t = old ]; then cd $root/old_tree; else cd $root; fi
  echo "== host $t $i"
  PYTHONPATH=/tmp/site:$PWD SHAPES=1 ROUNDS=2 timeout 110 python3 -u $root/benchmarks/raw/next_s52/host_sleep.py $OUT/hs_$t$i.json 2>&1 | grep -v -i "warn\|transformers\]" | grep -E "prim mask|sdpa mask|round"
  stamp "host $t $i"
done; done
