#!/usr/bin/env bash
# Prepared in session 22 for the next session, about 380 s (issue 16): (1) the Hopper forward's
# ALiBi GPU tests, default and FLASHGEN_HOPPER_ALIBI_SHIFT=1 (the opt-in rendering: per-key
# vector once an item, the tile's constant in the row max; never run on a GPU), then masks.py's
# float64 checks of the ALiBi rows with the shift; (2) the shift's A/B, forward and
# forward+backward, alternating processes (off, on, off, on at head dim 64 where ALiBi's
# forward ran 0.65x the unmasked kernel; off, on at 128); (3) the new window + key-padding mask
# rows (masks.py window_*_boolpad: a sliding window over a padded batch) with their float64
# checks, then the hopper backward kind against the split kind on them (hopper_bwd.AUTO_WINDOW
# leaves a window with a mask to the split kind until timed).
# Then: where the shift is faster and its checks pass, make it the default (hopper.alibi_shift);
# where the hopper kind wins the boolpad rows, let AUTO_WINDOW take windows with masks.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s23/job_a.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu -n 4 \
  "tests/kernels/test_alibi.py::test_hopper_forward_on_gpu" > $W/pytest_alibi.txt 2>&1
stamp "pytest alibi rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_alibi.txt | tail -8 | cut -c1-600
FLASHGEN_HOPPER_ALIBI_SHIFT=1 timeout 60 python3 benchmarks/masks.py --budget 50 --dirs fwd \
  --shape 4,32,8,4096,64 --only alibi_causal,alibi_full --out $W/masks_shift_check.csv > $W/masks_shift_check.txt 2>&1
stamp "masks shift checks rc=$?"; grep -E "check|Error|failed" $W/masks_shift_check.txt | cut -c1-200
shift_ab() {  # tag shift shape
  FLASHGEN_HOPPER_ALIBI_SHIFT=$2 timeout 50 python3 benchmarks/masks.py --budget 42 --no-check \
    --dirs fwd,fwd+bwd --shape $3 --only alibi_causal,alibi_full --out $W/masks_$1.csv > $W/masks_$1.txt 2>&1
  stamp "masks $1 rc=$?"; grep -E "name=|Error|failed" $W/masks_$1.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops|pairs_frac)=[^ ]*//g' | cut -c1-240
}
shift_ab d64_off_1 0 4,32,8,4096,64
shift_ab d64_on_1 1 4,32,8,4096,64
shift_ab d64_off_2 0 4,32,8,4096,64
shift_ab d64_on_2 1 4,32,8,4096,64
shift_ab d128_off 0 4,16,4,4096,128
shift_ab d128_on 1 4,16,4,4096,128
timeout 100 python3 benchmarks/masks.py --budget 90 --shape 4,16,4,4096,128 \
  --only window_causal_1024_boolpad,window_2sided_512_boolpad --bwd-kinds hopper,split \
  --out $W/masks_winpad.csv > $W/masks_winpad.txt 2>&1
stamp "masks window+pad rc=$?"; grep -E "check|name=|^kinds|Error|failed" $W/masks_winpad.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-300
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
