#!/usr/bin/env bash
# Session 33 B9 (issue 15): the nanoGPT block's forward, 0.602 ms under the backend in B2 against
# 0.206 in session 29: what its site runs and where the time goes (benchmarks/gpt_site_probe.py).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s33b9/job.sh     (about 60 s), carrying .whl
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
timeout 150 python3 benchmarks/gpt_site_probe.py 2>&1 | grep -v Warn | cut -c1-250
stamp done
