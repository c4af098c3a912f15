# Session 52: A/B of this tree against an older one carried as old_tree/ (git archive <sha>
# flashgen templates tuning_db benchmarks, plus this directory's scripts): each run from inside
# its tree, since the scripts put "." first on sys.path. Attention sinks (next_s51/sinks_time.py)
# and the masked forward's host time (host_sleep.py), twice each, alternating.
. benchmarks/device_env.sh > /dev/null 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader
fmt() { python3 -c "
import sys, json
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: print(line.rstrip()[:200]); continue
    print(r['shape'], r['window'], 'err %.4f' % r['err'], ' '.join(f'{k}={v:.3f}' for k, v in r.items() if isinstance(v, float) and k != 'err'))
"; }
root=$PWD
for i in 1 2; do for t in old new; do
  if [ $t = old ]; then cd $root/old_tree; else cd $root; fi
  echo "== sinks $t $i ($(git -C $root log -1 --format=%h 2>/dev/null) $PWD)"
  PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -u benchmarks/raw/next_s51/sinks_time.py $OUT/sinks_$t$i.json 2>&1 | grep -v -i warn | fmt
done; done
for i in 1 2; do for t in old new; do
  if [ $t = old ]; then cd $root/old_tree; else cd $root; fi
  echo "== host $t $i"
  PYTHONPATH=/tmp/site:$PWD SHAPES=1 ROUNDS=3 timeout 100 python3 -u benchmarks/raw/next_s52/host_sleep.py $OUT/hs_$t$i.json 2>&1 | grep -v -i "warn\|transformers\]" | grep -E "prim mask|sdpa mask|round"
done; done
