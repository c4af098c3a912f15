#!/usr/bin/env bash
# Prepared in session 21 for the next session, about 420 s (issues 16, 14): the Hopper
# backward's GPU tests and the Hopper forward's dropout test (softcapping, ALiBi and dropout in
# the backward and dropout in the forward are new, never run on a GPU), then the softcap, ALiBi and dropout rows with
# the hopper kind against the split kind at both head dims (fill hopper_bwd.AUTO_SCORE_MODS
# where the hopper kind wins; at head dim 128 ptxas spills 132 bytes a thread for causal
# softcap and 124-332 for dropout, none at head dim 64), the dropout row with the Hopper
# forward as well (FLASHGEN_FWD_FAMILY=hopper: forced only; ptxas spills 0-300 bytes), then
# the backward grid on the shipped defaults beside cuDNN and FA2.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/next_s22/job_a.sh carrying .whl; move it to
# benchmarks/raw/h200_s<N>b<K>/ with its output.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
  "tests/kernels/test_hopper.py::test_hopper_dropout_matches_float64" > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-600
ROWS=softcap_causal,alibi_causal,alibi_full,dropout_causal
run() {  # tag shape extra: float64 checks with the hopper kind, then every row's fwd+bwd
  # under the hopper and split kinds alternating in one process (masks.py --bwd-kinds)
  FLASHGEN_BWD_KIND=hopper timeout 60 python3 benchmarks/masks.py --budget 50 --dirs fwd \
    --shape $2 --only $ROWS --out $W/masks_$1_check.csv > $W/masks_$1_check.txt 2>&1
  stamp "masks $1 checks rc=$?"; grep -E "check|Error|failed" $W/masks_$1_check.txt | cut -c1-200
  timeout 120 python3 benchmarks/masks.py --budget 110 --no-check --dirs fwd+bwd $3 \
    --bwd-kinds hopper,split --shape $2 --only $ROWS --out $W/masks_$1.csv > $W/masks_$1.txt 2>&1
  stamp "masks $1 rc=$?"; grep -E "kinds|name=|Error|failed" $W/masks_$1.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-300
}
run d128 4,16,4,4096,128 ""
run d64 4,32,8,4096,64 ""
# the dropout row with the Hopper forward too (forced; test_hopper_dropout_matches_float64 above)
FLASHGEN_FWD_FAMILY=hopper FLASHGEN_BWD_KIND=hopper timeout 60 python3 benchmarks/masks.py --budget 45 \
  --dirs fwd,fwd+bwd --only dropout_causal --out $W/masks_drop_hopper_fwd.csv > $W/masks_drop_hopper_fwd.txt 2>&1
stamp "masks dropout hopper fwd rc=$?"; grep -E "check|name=|Error|failed" $W/masks_drop_hopper_fwd.txt | cut -c1-260
FLASHGEN_IMPL=flashgen timeout 120 python3 benchmarks/bwd_grid.py --out $W --budget 100 --modes fast,det --fa2 > $W/bwd_grid.txt 2>&1
stamp "bwd grid rc=$?"
python3 benchmarks/bwd_grid.py --table $W/bwd_grid.json > $W/bwd_grid_table.md 2>&1; tail -28 $W/bwd_grid_table.md
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
