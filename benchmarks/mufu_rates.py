"""Throughput of the special-function unit's forms on the GPU: how many tanh / ex2 results an SM
retires a clock in float32 and in packed 16-bit forms (f16x2, bf16x2).

    python benchmarks/mufu_rates.py [--iters 256]

Why: the softcapped forward takes two MUFU results a score (tanh, then ex2), as much MUFU time
as the tensor cores' time at head dim 128 and twice it at 64 (benchmarks/RESULTS.md, session
33). On sm_90 ptxas turns a packed tanh.approx.f16x2 into two MUFU.TANH.F16 ops (static SASS),
so a packed form pays only if those half-precision ops retire faster than the float32 one;
this measures it. Each thread runs a dependent chain of `--iters` ops on each of eight
registers (enough independent chains per warp to keep the unit busy), over a grid of many
programs; results a second = elements x iters / time (a packed op counts two elements).
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

FORMS = {
    # name: (PTX op, elements per 32-bit register)
    "tanh.f32": ("tanh.approx.f32", 1),
    "tanh.f16x2": ("tanh.approx.f16x2", 2),
    "tanh.bf16x2": ("tanh.approx.bf16x2", 2),
    "ex2.f32": ("ex2.approx.ftz.f32", 1),
    "ex2.f16x2": ("ex2.approx.f16x2", 2),
    "ex2.bf16x2": ("ex2.approx.ftz.bf16x2", 2),
}


@triton.jit
def chain(X, Y, ASM: tl.constexpr, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    """ITERS dependent `ASM` ops on each element (32-bit registers) of one block."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    for _ in range(ITERS):
        x = tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(Y + offs, x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=256)
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    block = 8 * 32 * 8  # eight warps, eight registers a thread
    n = block * sms * 16
    # small values (|x| < 1 as f32, f16 and bf16 halves alike): no denormals, no infinities
    x = (torch.rand(n, device="cuda") * 0.5).view(torch.int32)
    y = torch.empty_like(x)
    print(f"{props.name}: {sms} SMs, {n} registers x {args.iters} ops")
    for name, (op, per_reg) in FORMS.items():
        asm = f"{op} $0, $1;"
        run = lambda asm=asm: chain[(n // block,)](x, y, asm, args.iters, block, num_warps=8)  # noqa: E731
        run()
        ms = min(triton.testing.do_bench(run, rep=50, return_mode="median") for _ in range(3))
        per_s = n * per_reg * args.iters / (ms * 1e-3)
        print(f"{name:12s} {ms:8.4f} ms  {per_s / 1e12:7.3f} T results/s  "
              f"{per_s / sms / 1.98e9:6.2f} a clock an SM at 1.98 GHz")  # fmt: skip


if __name__ == "__main__":
    main()
