#!/usr/bin/env bash
# Session 12, batch B7 (issue 16): dropout at head dim 128 NON-causal (masks.py has the causal row
# only): "own" = the defaults with dropout's dQ kernel on (128, 64, 8, 3) (dK/dV (64, 128, 8, 3))
# against "same" = the dQ kernel on the dK/dV kernel's config, whose default then is
# (128, 128, 8, 2) (the keep tile pushes (64, 128, 8, 3)'s dQ kernel past the limit);
# alternated twice in one process, caches dropped between; forward+backward.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 150 python3 - > $W/dropout_full_ab.txt 2>&1 <<'PY'
import sys
sys.path.insert(0, "benchmarks")
import masks
from flashgen.hardware import sram
from flashgen.kernels import bwd, plans
from flashgen.runtime import dispatch
own_b, own_s = bwd._dq_config, sram.dq_config
same = lambda spec, cfg, cap: cfg
for label in ("own", "same", "own", "same"):
    bwd._dq_config, sram.dq_config = (own_b, own_s) if label == "own" else (same, same)
    dispatch.clear_cache(); plans.clear_all()
    print("dq config:", label, flush=True)
    masks.speed("dropout_full", False, {"dropout_p": 0.1}, {}, None, (4, 16, 4, 4096, 128),
                lambda r: None, ("fwd+bwd",))
PY
stamp "ab rc=$?"; grep -E "dq config|name=|Error" $W/dropout_full_ab.txt | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
