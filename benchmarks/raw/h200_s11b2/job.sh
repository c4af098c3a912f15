#!/usr/bin/env bash
# Session 11, batch B2: can cuDNN's SDPA backward run on flashgen's forward (out, lse)?
# hybrid_probe.py: float64 checks, then the grid timed (cuDNN fwd+bwd vs flashgen fwd + cuDNN bwd).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 400 python3 benchmarks/hybrid_probe.py --out $W --rounds 2 --rep 20 > $W/hybrid_probe.txt 2>&1
stamp "hybrid probe rc=$?"; grep -v Warn $W/hybrid_probe.txt | tail -40
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
