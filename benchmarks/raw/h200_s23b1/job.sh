#!/usr/bin/env bash
# Session 23 B1, about 520 s (issues 14, 16): the GPU tests session 22's review changed without a
# GPU run (the Hopper backward's and forward's mask/score-mod tests), then next_s23/job_b.sh:
# the spill-free Hopper backward under Nsight Compute (what limits it since session 20's fixes)
# and a 20-trial search of its configs at 4k.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s23b1/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 170 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py \
  tests/kernels/test_hopper.py > $W/pytest_hopper.txt 2>&1
stamp "pytest hopper rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper.txt | tail -8 | cut -c1-600
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for mode in full causal; do
  FLASHGEN_BWD_KIND=hopper timeout 100 $NCU --clock-control none --set full --import-source no \
    --kernel-name regex:attn_bwd_ws --launch-skip 2 --launch-count 1 -o $W/ours_$mode \
    python3 benchmarks/raw/h200_s20b3/ncu_bwd.py $mode > $W/ncu_ours_$mode.log 2>&1
  stamp "ncu ours $mode rc=$?"
done
for r in $W/*.ncu-rep; do
  base=${r%.ncu-rep}
  $NCU -i $r --page details --csv > $base.details.csv 2>/dev/null
  $NCU -i $r --page source --csv --print-source sass | gzip > $base.src_sass.csv.gz 2>/dev/null
  rm -f $r
done
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|Local Memory Spilling Requests\"|Registers Per" $W/*.details.csv | cut -c1-220
timeout 190 python3 benchmarks/hopper_bwd_tune.py --out $W/hopper_bwd_tune.json --trials 20 \
  --head-dims 64,128 --seqs 4096 --budget 42 > $W/hopper_bwd_tune.txt 2>&1
stamp "tune rc=$?"; grep -v Warn $W/hopper_bwd_tune.txt | cut -c1-400
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
