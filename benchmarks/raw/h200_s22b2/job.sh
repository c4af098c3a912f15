#!/usr/bin/env bash
# Session 22 B2 (issue 16), about 400 s: the Hopper backward's softcap/ALiBi/dropout float64 GPU
# test with its reference fixed (rows that see no key are zeros in the kernels; B1's reference
# gave NaN there), then the hopper-vs-split A/B (masks.py --bwd-kinds, one process) where the
# AUTO tables have no reading yet: softcap and dropout two-sided at 4k keys, every score-mod row
# at 1k keys, head dim 64's padding, mask and window rows at 1k, head dim 128's windows at 1k;
# then the launch path's host time (issue 15).
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s22/job_c.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu \
  "tests/kernels/test_hopper_bwd.py::test_softcap_alibi_and_dropout_match_float64" > $W/pytest_scoremods.txt 2>&1 &
TEST=$!
SM=softcap_causal,softcap_full,alibi_causal,alibi_full,dropout_causal,dropout_full
# float64 checks of the new rows (default kinds) while the test runs: correctness only
timeout 90 python3 benchmarks/masks.py --budget 80 --dirs fwd --shape 4,16,4,1024,128 \
  --only softcap_full,dropout_full --out $W/masks_check.csv > $W/masks_check.txt 2>&1
stamp "masks checks rc=$?"; grep -E "check|Error|failed" $W/masks_check.txt | cut -c1-200
wait $TEST; stamp "pytest score mods rc=$?"
grep -E "passed|failed|Error" $W/pytest_scoremods.txt | tail -6 | cut -c1-600
ab() {  # tag shape rows: each row's fwd+bwd under the hopper and split kinds, alternating
  timeout $4 python3 benchmarks/masks.py --budget $(( $4 - 10 )) --no-check --dirs fwd+bwd \
    --bwd-kinds hopper,split --shape $2 --only $3 --out $W/masks_$1.csv > $W/masks_$1.txt 2>&1
  stamp "masks $1 rc=$?"; grep -E "^kinds|Error|failed" $W/masks_$1.txt | cut -c1-300
}
ab d128_4k 4,16,4,4096,128 softcap_full,dropout_full 50
ab d64_4k 4,32,8,4096,64 softcap_full,dropout_full 50
ab d128_1k 16,16,4,1024,128 $SM,window_causal_256,window_2sided_512 110
ab d64_1k 16,32,8,1024,64 $SM,pad_right_full,pad_left_causal,attn_mask_add_pad,attn_mask_bool_pad,window_causal_256,window_2sided_512 170
timeout 90 python3 benchmarks/host_time.py --rounds 9 > $W/host_time.txt 2>&1
stamp "host_time rc=$?"; tail -30 $W/host_time.txt | cut -c1-200
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
