#!/usr/bin/env bash
# Session 12, batch B6 (issue 16): dropout's dQ kernel on its own (128, 64, 8, 3) config ("own")
# against the dK/dV kernel's config ("same", as before this session), alternated twice in one
# process (masks.py's timing of the dropout_causal row, the split backward's plans rebuilt
# between), forward+backward only.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 150 python3 - > $W/dropout_dq_ab.txt 2>&1 <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import masks
from flashgen.kernels import bwd
from flashgen.hardware import dq_tiles
own = bwd._dq_config
same = lambda spec, cfg, cap: cfg
row = next(v for v in masks.variants(4, 4096, 16) if v[0] == "dropout_causal")
name, causal, kw, mk, cap = row
for label in ("own", "same", "own", "same"):
    bwd._dq_config = own if label == "own" else same
    bwd._plans.clear()
    print("dq config:", label, flush=True)
    masks.speed(name, causal, kw, mk, cap, (4, 16, 4, 4096, 128), lambda r: None, ("fwd+bwd",))
PY
stamp "ab rc=$?"; grep -E "dq config|name=" $W/dropout_dq_ab.txt | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
