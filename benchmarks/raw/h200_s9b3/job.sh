#!/usr/bin/env bash
# Session 9, batch B3: the GPU test suite on merged main (ALiBi, the helpers' test and harness
# refactors, the Hopper launch plan), ALiBi's mask rows, the benchmark scripts moved onto
# flashgen/bench/scripts.py run for real, and a cProfile of the forward's host path.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
W=$OUT/w; mkdir -p "$W"
export FLASHGEN_COMMIT=${FLASHGEN_COMMIT:-unknown}
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
timeout 230 python3 -m pytest -m gpu -n 12 -q --no-header -p no:cacheprovider -rfE tests > "$OUT/pytest_gpu.txt" 2>&1
stamp "gpu suite rc=$?"; tail -15 "$OUT/pytest_gpu.txt"
timeout 150 python3 benchmarks/masks.py --only alibi_causal,alibi_full,softcap_causal,attn_mask_bias_causal \
  --shape 4,16,4,4096,128 --budget 120 --out "$W/masks_alibi.csv" 2>&1 | tail -20
stamp "masks rc=$?"
timeout 40 python3 benchmarks/raw/h200_s9b3/profile_host.py > "$W/profile_host.txt" 2>&1
stamp "profile rc=$?"
timeout 100 python3 benchmarks/gpu_check.py "$W/gpu_check_fwd.json" 2>&1 | tail -8
stamp "gpu_check rc=$?"
timeout 60 python3 benchmarks/gpu_check_bwd.py --timing-only "$W/gpu_check_bwd.json" 2>&1 | tail -8
stamp "gpu_check_bwd rc=$?"
tar czf "$OUT/results.tgz" -C "$W" .
