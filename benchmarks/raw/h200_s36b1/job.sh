#!/usr/bin/env bash
# Prepared in session 35 (issues 13, 15, 16) as next_s36; run in session 36 as B1 (`job.sh`, output
# here) and B2 (`job.sh prefetch`, output in ../h200_s36b2/); `grid` not run (nothing installed).
# Three calls, carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s36/job.sh          (about 220 s)
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s36/job.sh grid     (about 120 s)
# 1. The forward records' flashgen-vs-SDPA comparison redone (recompare.py --direction fwd):
#    the forward records (`impl`, `impl_ratio`) date from 2026-11-29/30, before late_wait, the
#    persistent 16k record and session 35's 4k non-causal record without ping-pong (1.025x);
#    head dim 128's 4k/16k non-causal records named flashgen by 1.017-1.023x, under the op's
#    1.05 margin (`dispatch.FLASHGEN_MARGIN`), so the op runs cuDNN there. Session 35 B10 ran
#    it once (three rounds): 4k non-causal 1.114x, the rest as before; one reading was not
#    enough to install (cuDNN's own time spread 10% in B2). Five rounds here: if the 4k row
#    holds past the margin again, install the file (tuning_db/nvidia-h200.json) and run `grid`.
# 2. mix_bwd.py again with more rounds: session 35 B6 found the op's forward+backward 0.05 ms
#    over its two kernels' sum at B16 H16 1k d128 (0.977x cuDNN's), beyond cuDNN's own overhead.
# `grid`: vendor_grid.py --control on the installed records (cuDNN timed twice a round).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s36/job.sh prefetch (about 250 s)
# `prefetch` (issue 16): the portable forward's dense mask tile prefetched one step ahead
# (mask_prefetch.patch; the patched template beside it, attn_fwd.py.jinja.prefetch). Session 35
# found, compiling ahead of time for sm_90 with Triton 3.6, that the portable forward's dense
# mask load is a plain tt.load in the loop (the pipeliner takes only loads that feed a dot), so
# each step waits for it: a dense bias runs at 0.42-0.45 of the unmasked kernel. Patched
# (128 x 64 tiles, 8 warps, 3 stages, causal bias): registers 228 -> 255, no spills, static SASS
# 3,152 -> 3,768; CPU tests of masks, padding and windows pass (interpreter). Here: the GPU mask
# tests on the patched tree, then masks.py's dense rows (bias causal; HF's [B, 1, N, N] boolean
# takes the block lists, which the patch leaves alone: a control), old and new alternating.
# If faster, apply the patch (git apply) and record it; the backward loads its mask tiles the
# same way (templates/attn_bwd.py.jinja: the dQ kernel per key tile, the dK/dV kernel per query
# tile; dense rows read 0.56-0.68 forward+backward): the same prefetch there is the next step.
# Results in $OUT/next.tgz / $OUT/grid.tgz / $OUT/prefetch.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = prefetch ]; then
  # (pytest puts its working directory first on sys.path: the tests run inside new_tree)
  mkdir -p new_tree && cp -r flashgen templates tuning_db tests pyproject.toml new_tree/
  cp benchmarks/raw/next_s36/attn_fwd.py.jinja.prefetch new_tree/templates/attn_fwd.py.jinja
  (cd new_tree && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider \
    -p no:randomly -m gpu -n 8 tests/kernels/test_attn_mask.py tests/kernels/test_padding.py) > $W/tests.txt 2>&1
  stamp "mask tests (patched) rc=$?"; tail -2 $W/tests.txt; grep -E "^FAILED|^ERROR" $W/tests.txt | head
  for rep in 1 2; do
    for tree in old new; do
      root=$PWD; [ $tree = new ] && root=$PWD/new_tree
      check=--no-check; [ $tree$rep = new1 ] && check=
      PYTHONPATH=/tmp/site:$root timeout 80 python3 benchmarks/masks.py $check --dirs fwd,fwd+bwd \
        --rounds 3 --budget 70 --shape 4,16,4,4096,128 --only attn_mask_bias_causal,attn_mask_bool_b1nn \
        --out $W/masks_${tree}_$rep.csv > $W/masks_${tree}_$rep.txt 2>&1
      stamp "$tree $rep rc=$?"; grep -h "^name=\|^check\|failed" $W/masks_${tree}_$rep.txt | sed 's/ b=4.*dir=/ /; s/ sdpa_ms.*ratio_vs_plain=/ ratio=/; s/ speedup.*//' | cut -c1-200
    done
  done
  cd $W && tar czf $OUT/prefetch.tgz . && exit 0
fi
if [ "${1:-}" = grid ]; then
  timeout 250 python3 benchmarks/vendor_grid.py --impls op,sdpa_cudnn,sdpa_flash,sdpa_efficient \
    --control --rounds 6 --rep 20 --out $W/vendor_grid.json > $W/vendor_grid.txt 2>&1
  stamp "vendor rc=$?"; grep -v Warn $W/vendor_grid.txt | grep -E "worst|A/A control" | tail -4
  cd $W && tar czf $OUT/grid.tgz . && exit 0
fi
timeout 150 python3 benchmarks/recompare.py tuning_db/nvidia-h200.json --out $W/nvidia-h200.json \
  --json $W/recompare.json --direction fwd --rounds 5 --rep 40 > $W/recompare.txt 2>&1
stamp "recompare rc=$?"; grep -v -i warn $W/recompare.txt | tail -14 | cut -c1-220
timeout 100 python3 benchmarks/mix_bwd.py --rounds 9 --rep 30 --out $W/mix_bwd.json > $W/mix_bwd.txt 2>&1
stamp "mix_bwd rc=$?"; grep -v -i warn $W/mix_bwd.txt | cut -c1-300
cd $W && tar czf $OUT/next.tgz .
