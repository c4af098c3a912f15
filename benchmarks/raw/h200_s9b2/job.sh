#!/usr/bin/env bash
# Session 9, batch B2: issue 18's nanoGPT and ViT examples on the H200 (never measured there
# before), and the two GPU tests fixed after B1.
set -u
# (the lines benchmarks/device_env.sh holds stood here inline when the batch ran)
. benchmarks/device_env.sh  # OUT, stamp, the wheels, PYTHONPATH
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__, torch.cuda.get_device_name())"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE tests/kernels/test_launch_gpu.py \
  -k "window_sizes or routing_during_capture or hopper_plan" > "$OUT/gpu_tests.txt" 2>&1
stamp "gpu tests rc=$?"; tail -3 "$OUT/gpu_tests.txt"
timeout 130 python3 examples/train_nanogpt.py --json "$OUT/nanogpt_1k.json" 2>&1 | grep -v Warning | tail -15
stamp "nanogpt 1k rc=$?"
timeout 110 python3 examples/vision_encoder.py --json "$OUT/vit_224.json" 2>&1 | grep -v Warning | tail -12
stamp "vit 224 rc=$?"
timeout 110 python3 examples/vision_encoder.py --image 512 --batch 32 --json "$OUT/vit_512.json" 2>&1 | grep -v Warning | tail -12
stamp "vit 512 rc=$?"
timeout 120 python3 examples/train_nanogpt.py --layers 6 --block-size 4096 --batch 4 --json "$OUT/nanogpt_4k.json" 2>&1 | grep -v Warning | tail -15
stamp "nanogpt 4k rc=$?"
