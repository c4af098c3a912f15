#!/usr/bin/env bash
# Session 34 B1 (suite) and B2 (speed), prepared in session 33 as next_s34. Two calls,
# carrying .whl:
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b1/job.sh suite   (about 400 s)
#     The whole GPU suite on the final tree. New since session 33's B6/B7/B8: FIXED_MAX's limit
#     per dtype (float16 caps up to 9.7; test_hopper_fixed_max_holds_at_the_caps_ends[fp16]
#     never ran on the GPU).
#   FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s34b1/job.sh speed   (about 200 s)
#     examples/backend_speed.py with its new alternating rounds (median of 5; B2/B10 read one
#     block or the other ~0.35 ms high with one reading), the three block styles at 2k.
# Results in $OUT/<part>.tgz.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
if [ "${1:-}" = suite ]; then
  timeout 470 python3 -m pytest -q -p no:cacheprovider -p no:randomly -m gpu -n 8 tests > $W/gpu_suite.txt 2>&1
  stamp "gpu suite rc=$?"; tail -3 $W/gpu_suite.txt; grep -E "^FAILED|^ERROR" $W/gpu_suite.txt | head -20
  cd $W && tar czf $OUT/suite.tgz . && exit 0
fi
timeout 150 python3 examples/backend_speed.py --styles gpt,llama_sdpa,llama_repeat --seqs 2048 \
  --json $W/backend_speed.json > $W/backend_speed.txt 2>&1
stamp "backend_speed rc=$?"; grep -E "replaced|ms" $W/backend_speed.txt | cut -c1-250 | tail -6
cd $W && tar czf $OUT/speed.tgz .
