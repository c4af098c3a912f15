"""Registers, spills and shared memory of the split backward's kernels per config, compiled ahead
of time for sm_90 on a CPU machine (no GPU).

The dK/dV and dQ kernels have different live sets (dK/dV holds K, V and two fp32 accumulators of
BLOCK_N rows; dQ holds Q, dO and one accumulator of BLOCK_M rows), so each is compiled on its own
for every (BLOCK_M, BLOCK_N, warps, stages) asked for. Registers and spills come from the cubin
(`cuobjdump --dump-resource-usage`, shipped with Triton), shared bytes from the compiler's metadata;
the specialisation is the JIT's for lengths and strides divisible by 16 (as
benchmarks/sram_vs_compiler.py). A config that spills, or asks for more than the H200's 232,448
bytes of shared memory, is not worth timing.

Usage (repo root; Triton 3.6 is what the H200 runs):
    env -u TRITON_INTERPRET PYTHONPATH=. /path/to/triton36/python benchmarks/bwd_profile.py \
        --dims 64 128 --out bwd_profile.json [--tma/--no-tma] [--configs BM,BN,W,S ...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(Path(__file__).resolve().parent.parent))

DEFAULT_CONFIGS = [
    c
    for c in itertools.product((32, 64, 128), (32, 64, 128), (4, 8), (2, 3, 4))
    if not (c[0] == 128 and c[1] == 128 and c[2] == 4)
]


def _cuobjdump() -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def compile_one(job):
    """(d, causal, kernel, cfg) -> dict(shared, regs, spills) or error."""
    d, causal, kernel, cfg, tma = job
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise RuntimeError("unset TRITON_INTERPRET")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from flashgen.core.spec import KernelSpec
    from flashgen.kernels.codegen import load

    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    name = kernel + ("_tma" if tma else "")
    fn = getattr(load(spec), name)
    bm, bn, warps, stages = cfg
    signature, attrs = {}, {}
    for i, arg in enumerate(fn.arg_names):
        if arg.startswith("desc_"):
            rows = bm if arg in ("desc_q", "desc_do") else bn
            kind = f"tensordesc<bf16[1, 1, {rows}, {spec.block_d}]>"
        elif arg.startswith("BLOCK_"):
            kind = "constexpr"
        elif arg == "sm_scale":
            kind = "fp32"
        elif arg in ("Lse", "Delta"):
            kind = "*fp32"
        elif arg in ("Q", "K", "V", "DO", "DQ", "DK", "DV"):
            kind = "*bf16"
        else:
            kind = "i32"
        signature[arg] = kind
        if kind.startswith("*") or kind == "i32":
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn=fn, signature=signature, constexprs={"BLOCK_M": bm, "BLOCK_N": bn},
                    attrs=attrs)  # fmt: skip
    try:
        out = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                             options={"num_warps": warps, "num_stages": stages})  # fmt: skip
    except Exception as exc:
        return job, {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(out.asm["cubin"])
        fh.flush()
        text = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name],
                              capture_output=True, text=True).stdout  # fmt: skip
    regs = re.search(r"REG:(\d+)", text)
    stack = re.search(r"STACK:(\d+)", text)
    return job, {
        "shared": int(out.metadata.shared),
        "regs": int(regs.group(1)) if regs else None,
        "stack": int(stack.group(1)) if stack else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--causal", choices=("yes", "no", "both"), default="no")
    parser.add_argument("--configs", nargs="*", help="BM,BN,W,S (default: a 3x3x2x3 grid)")
    parser.add_argument("--kernels", default="attn_bwd_dkdv,attn_bwd_dq")
    parser.add_argument("--no-tma", action="store_true", help="pointer builds, not *_tma")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="bwd_profile.json")
    args = parser.parse_args(argv)
    cfgs = [tuple(int(x) for x in c.split(",")) for c in args.configs] if args.configs else (
        DEFAULT_CONFIGS)  # fmt: skip
    causals = {"yes": (True,), "no": (False,), "both": (False, True)}[args.causal]
    jobs = [(d, c, k, cfg, not args.no_tma) for d in args.dims for c in causals
            for k in args.kernels.split(",") for cfg in cfgs]  # fmt: skip
    rows = []
    with ProcessPoolExecutor(args.jobs) as pool:
        for (d, causal, kernel, cfg, tma), res in pool.map(compile_one, jobs):
            row = dict(d=d, causal=causal, kernel=kernel, tma=tma, cfg=list(cfg), **res)
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
