#!/usr/bin/env bash
# Session 15, batch B6 (issues 15, 16): GPU tests of the launch path, the SDPA routing, the
# forward kernels and the backend on this tree (fwd.forward_plain); then the bool key-padding
# row's forward+backward wall time in eight processes, the split backward's overlap launching
# dQ first ("1", the default) or dK/dV first ("2"), alternated, to see which order gives the
# overlapped time (3.64 ms) and which the serial one (4.07 ms, B4).
set -u
. benchmarks/device_env.sh
W=$OUT/work; mkdir -p $W
timeout 260 python3 -m pytest -q -p no:cacheprovider -m gpu -n 6 tests/kernels/test_launch_gpu.py tests/runtime/test_vendor.py tests/runtime/test_vendor_hybrid.py tests/kernels/test_forward.py tests/kernels/test_bwd_overlap.py tests/compile/test_backend_gpu.py > $W/pytest_gpu.txt 2>&1
stamp "pytest rc=$?"; tail -4 $W/pytest_gpu.txt | cut -c1-300
for r in 1a 2a 1b 2b 1c 2c 1d 2d; do
  FLASHGEN_BWD_OVERLAP=${r:0:1} timeout 40 python3 benchmarks/mask_kernels.py --wall --iters 3 --only attn_mask_bool_pad,pad_right_full > $W/overlap_$r.txt 2>&1
  stamp "overlap $r rc=$?"; grep -E "wall" $W/overlap_$r.txt | grep -v plain | cut -c1-120
done
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
