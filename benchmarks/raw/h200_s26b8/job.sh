#!/usr/bin/env bash
# Prepared in session 26 as B8 (issue 14; not run then: no device time left), about 450 s:
# 1. which backward kind at 1k and 4k keys now that head dim 128 takes dQ's products in turns
#    (bwd_grid.py modes fast / hopper / split, four alternating rounds; the 1k MHA rows were the
#    grid's lowest in every session-26 reading, and causal head dim 128 at 1k runs the split
#    kind, hopper_bwd.AUTO);
# 2. variants of the shipped backward configs where the grid is weakest (bwd_variants.py):
#    head dim 64 (turns, two staging buffers or two dS slots without causal masking) and 128
#    (a persistent grid without causal masking, a dynamic one causal, both with turns); and
#    dQ's product before dK's by the step's taker in turns (dq_first with dq_turns, new in
#    session 26 after its last GPU run: compiled for sm_90 without spills, numerics unchecked),
#    at both head dims.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s26b8/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
FLASHGEN_IMPL=flashgen timeout 200 python3 benchmarks/bwd_grid.py --out $W --budget 170 --modes fast,hopper,split --rounds 4 --shapes 0,3,6,1,4,7 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"; grep -E "checks|failed" $W/bwd_grid.txt | head -5 | cut -c1-300
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -12 $W/bwd_grid_table.md
timeout 300 python3 benchmarks/bwd_variants.py --out $W --budget 240 --rounds 3 \
  --vary t2=dq_turns:1,ds_bufs:2,dq_bufs:1@64 --vary dq2=dq_bufs:2@64f --vary ds2=ds_bufs:2@64f \
  --vary P=persistent:1@128f --vary dyn=persistent:1,dynamic:1@128c --vary tf=dq_first:1@128 \
  --vary tf64=dq_turns:1,ds_bufs:2,dq_bufs:1,dq_first:1@64 > $W/bwd_variants.txt 2>&1
stamp "variants rc=$?"; grep -v '^{"shape"' $W/bwd_variants.txt | tail -14 | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
