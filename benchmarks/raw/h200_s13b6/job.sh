#!/usr/bin/env bash
# Session 13, batch B6: (issue 16) the block-sparse forward of a boolean [B, 1, N, N] mask per
# config and kernel by kernel (the lists' tensor operations included); (issue 15) host time per
# call beside SDPA, nothing changed in the launch path since session 11's reading.
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 100 python3 benchmarks/masked_tiles.py --only bool_b1nn --parts fwd --budget 80 --workers 12 --out $W > $W/masked_tiles.txt 2>&1
stamp "masked tiles rc=$?"; grep -v Warn $W/masked_tiles.txt | cut -c1-300
timeout 60 python3 benchmarks/mask_kernels.py --only attn_mask_bool_b1nn,attn_mask_bias_causal > $W/mask_kernels.txt 2>&1
stamp "mask_kernels rc=$?"; cat $W/mask_kernels.txt | grep -v Warn | head -40
for shape in 1,1,128,128 1,1,128,64; do
  timeout 45 python3 benchmarks/host_time.py --label s13b6 --shape $shape --rounds 9 --out $W/host_${shape//,/x}.json > $W/host_${shape//,/x}.txt 2>&1
  stamp "host $shape rc=$?"; head -8 $W/host_${shape//,/x}.txt
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
