"""Session 32 B7 (issue 13): the SM clock and board power while the shipped head-dim-128 16k
non-causal forward (B1 H16, MHA) and cuDNN's run back to back as do_bench times them, beside
the TFLOP/s they read. B6's ncu run (one launch each) saw 1.69 GHz and 3.08 ms (713 TFLOP/s)
for ours; do_bench reads ~3.5 ms. nvidia-smi samples every 50 ms into a CSV; each phase's
median clock and power are printed with its timing.
"""

import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashgen

out_dir = sys.argv[1]
b, h, n, d = 1, 16, 16384, 128
flops = 4 * b * h * n * n * d
gen = torch.Generator(device="cuda").manual_seed(0)
q, k, v = (
    torch.randn(b, h, n, d, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3)
)


def ours():
    flashgen.attention(q, k, v, causal=False, impl="flashgen")


def cudnn():
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v)


for fn in (ours, cudnn):
    fn()
torch.cuda.synchronize()
log = open(f"{out_dir}/smi.csv", "w")  # noqa: SIM115 (the sampler writes it throughout)
smi = subprocess.Popen(
    [
        "nvidia-smi",
        "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
        "--format=csv,noheader,nounits",
        "-lms",
        "50",
    ],
    stdout=log,
)
time.sleep(1.0)
phases = []
for rnd in range(3):
    for name, fn in (("ours", ours), ("cudnn", cudnn)):
        t0 = time.time()
        ms = triton.testing.do_bench(fn, warmup=200, rep=3000, return_mode="median")
        phases.append((name, rnd, t0, time.time(), ms))
        print(f"{name} round {rnd}: {ms:.4f} ms, {flops / ms / 1e9:.1f} TFLOP/s", flush=True)
time.sleep(0.5)
smi.terminate()
smi.wait()
log.close()
samples = []
with open(f"{out_dir}/smi.csv") as f:
    lines = f.readlines()
for line in lines:
    parts = [p.strip() for p in line.split(",")]
    try:
        ts = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float(
            "0." + parts[0].split(".")[1]
        )
        samples.append((ts, float(parts[1]), float(parts[2]), parts[4]))
    except (ValueError, IndexError):
        continue
for name, rnd, t0, t1, ms in phases:
    inside = [s for s in samples if t0 + 0.3 <= s[0] <= t1]
    if inside:
        clk = statistics.median(s[1] for s in inside)
        pw = statistics.median(s[2] for s in inside)
        reasons = sorted({s[3] for s in inside})
        print(
            f"{name} round {rnd}: {ms:.4f} ms, {flops / ms / 1e9:.1f} TFLOP/s, SM clock median "
            f"{clk:.0f} MHz, power {pw:.0f} W over {len(inside)} samples, throttle {reasons}"
        )
