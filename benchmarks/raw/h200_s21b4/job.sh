#!/usr/bin/env bash
# Session 21 B4 (issues 16, 14), about 450 s: the Hopper backward's GPU tests (the windowed
# rendering is new), then the window rows with the hopper kind against the split kind, a
# profile of the boolean against the additive key-padding row (B2: 3% against 19% gained),
# and the length and key-padding rows at more shapes (head dim 64, 1k and 16k keys) with
# either kind, for hopper_bwd.AUTO_EXTRAS / AUTO_WINDOW.
# Run as FLASHGEN_COMMIT=<sha> bash benchmarks/raw/h200_s21b4/job.sh carrying .whl.
set -u
. benchmarks/device_env.sh > /dev/null 2>&1
W=$OUT/work; mkdir -p $W
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -n 8 tests/kernels/test_hopper_bwd.py > $W/pytest_hopper_bwd.txt 2>&1
stamp "pytest hopper_bwd rc=$?"; grep -E "passed|failed|FAILED|Error" $W/pytest_hopper_bwd.txt | tail -8 | cut -c1-600
WIN=window_causal_1024,window_causal_256,window_2sided_512
PAD=pad_right_full,pad_right_causal,pad_left_causal,attn_mask_bool_pad,attn_mask_add_pad
run() {  # tag kind shape rows
  FLASHGEN_BWD_KIND=$2 timeout 100 python3 benchmarks/masks.py --budget 80 --no-check --dirs fwd+bwd \
    --shape $3 --only $4 --out $W/masks_$1.csv > $W/masks_$1.txt 2>&1
  stamp "masks $1 rc=$?"; grep -E "name=|Error|failed" $W/masks_$1.txt | sed -E 's/ (b|hq|hkv|portable_ms|tflops|plain_tflops)=[^ ]*//g' | cut -c1-260
}
run win128_hopper hopper 4,16,4,4096,128 $WIN
run win128_split split 4,16,4,4096,128 $WIN
run win64_hopper hopper 4,32,8,4096,64 $WIN
run win64_split split 4,32,8,4096,64 $WIN
python3 - > $W/profile_pad.txt 2>&1 <<'PY'
import torch
import flashgen
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
b, hq, hkv, n, d = 4, 16, 4, 4096, 128
q = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
lens = torch.randint(n // 2, n + 1, (b,))
keep = (torch.arange(n)[None, :] < lens[:, None]).cuda()
masks = {"bool": keep[:, None, None, :],
         "add": torch.zeros(keep.shape, dtype=torch.bfloat16, device="cuda").masked_fill(~keep, torch.finfo(torch.bfloat16).min)[:, None, None, :]}
for name, m in masks.items():
    def step():
        out = flashgen.attention(q, k, v, attn_mask=m)
        out.backward(torch.ones_like(out))
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    print("==", name)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=90))
PY
stamp "profile rc=$?"; grep -E "^==|attn|Self CUDA time total" $W/profile_pad.txt | cut -c1-200 | head -40
run pad128_1k_auto "" 16,16,4,1024,128 $PAD
run pad128_1k_hopper hopper 16,16,4,1024,128 $PAD
run pad128_16k_auto "" 1,16,4,16384,128 $PAD
run pad64_4k_split split 4,32,8,4096,64 $PAD
run pad64_4k_hopper hopper 4,32,8,4096,64 $PAD
run pad128_4k_auto "" 4,16,4,4096,128 $PAD
run pad128_4k_split split 4,16,4,4096,128 $PAD
tar czf $OUT/work.tgz -C $OUT work; rm -rf $W
stamp end
