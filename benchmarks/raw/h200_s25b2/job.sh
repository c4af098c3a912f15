#!/usr/bin/env bash
# Session 25, batch B2 (issue 14), about 330 s: the Hopper backward's dQ staging tile with a
# 32-byte swizzle (session 24 B1's profile: the 128-byte one's stores took twice their ideal
# shared wavefronts). (1) The backward's GPU tests (float64, bit checks) on the new default;
# (2) dq_swizzle_ab.py: 32 against 128 bytes, backward alone, 18 shapes, 5 alternating rounds.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s25b2/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py -p no:randomly > $W/gpu_hopper_bwd_tests.txt 2>&1
stamp "hopper bwd gpu tests rc=$?"; grep -E "passed|failed|FAILED|Error" $W/gpu_hopper_bwd_tests.txt | tail -8 | cut -c1-400
timeout 260 python3 benchmarks/raw/h200_s25b2/dq_swizzle_ab.py $W/dq_swizzle_ab.json 5 220 > $W/dq_swizzle_ab.txt 2>&1
stamp "ab rc=$?"; python3 -c "
import json; rows=json.load(open('$W/dq_swizzle_ab.json'))
for r in rows: print(r['shape'], r['causal'], r['config'], {k: round(v,4) for k,v in r['median'].items()}, r['ratio_32_over_128'], r['rel_diff'])
"; tail -1 $W/dq_swizzle_ab.txt
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
