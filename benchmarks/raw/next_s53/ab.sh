# Session 53: the masked forward's routes (362cad8) against the tree before them (old_tree/ =
# git archive 08eafc0+hf_padded, carried), host time with the GPU busy (next_s52/host_sleep.py:
# the ops at ModernBERT's shape, then the compiled ModernBERT, 3 rounds), each arm run from
# inside its own tree (the script puts "." first on sys.path), alternating, twice. First the
# routes' GPU tests.
. benchmarks/device_env.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 tests/runtime/test_routes.py \
  tests/kernels/test_attn_mask.py > $OUT/gpu_routes.txt 2>&1
stamp "routes gpu tests rc=$?"; tail -2 $OUT/gpu_routes.txt | cut -c1-300
root=$PWD
for i in 1 2; do for t in old new; do
  if [ $t = old ]; then cd $root/old_tree; else cd $root; fi
  echo "== host $t $i ($PWD)"
  PYTHONPATH=/tmp/site:$PWD SHAPES=1 ROUNDS=3 timeout 110 python3 -u $root/benchmarks/raw/next_s52/host_sleep.py $OUT/hs_$t$i.json 2>&1 | grep -v -i "warn\|transformers\]" | grep -E "prim mask|sdpa mask|round"
  stamp "host $t $i"
done; done
