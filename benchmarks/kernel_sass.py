"""Registers, spills, shared bytes and static SASS instruction counts of generated kernels,
compiled ahead of time for sm_90 on a CPU machine (no GPU).

Where a change moves work inside a kernel's inner loop (dropout's draw, a mask's test), the
count of the instructions it adds or removes, per opcode, is the first check before a GPU
timing. Each kernel is compiled as `benchmarks/sram_vs_compiler.py` compiles it (the JIT's
divisibility-16 specialisation; the dQ kernels on their own measured config) and disassembled
with the `cuobjdump` Triton ships; counts are of the static code (a loop body counts once).

`--family hopper` does the same for the Hopper Gluon forward (`hopper_aot.compile_for_sm90`
with its shipped config, or with `--seq N` the config the run time launches for N query rows:
`hopper.config_for`, the GPU's record with the extras' rules applied; assembled for sm_90a by
Triton's ptxas, whose spill bytes it prints too), with the mask flags of the spec (`--alibi`,
`--softcap`, `--window`, `--lengths`, `--attn-mask bool|add` (read as a key-padding mask; with
`--dense` as a full [Sq, Sk] tile), `--dropout`).

Usage (repo root; Triton 3.6 is what the H200 runs; an A/B puts the old tree first on
PYTHONPATH):
    env -u TRITON_INTERPRET PYTHONPATH=/path/to/triton36:. python benchmarks/kernel_sass.py \
        --head-dim 128 --causal --dropout --kernels attn_fwd_tma --config 64,64,4,3
    env -u TRITON_INTERPRET PYTHONPATH=/path/to/triton36:. python benchmarks/kernel_sass.py \
        --family hopper --head-dim 64 --alibi
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))

OPS = ("IMAD", "LOP3", "SHF", "ISETP", "IADD3", "VIADD", "FSEL", "SEL", "PRMT", "MUFU", "HGMMA",
       "FFMA", "FADD", "FMUL", "FMNMX", "I2F", "I2FP", "LDS", "STL", "LDL")  # fmt: skip


def sass_counts(cubin: bytes) -> tuple[dict, collections.Counter]:
    """({"regs", "stack", "overlap"} from the resource usage and the disassembly, opcode ->
    count) of a cubin; "overlap": `flashgen.kernels.hopper_aot.pv_overlap`, the exponentials
    ptxas placed beside each product still in flight."""
    from bwd_profile import _cuobjdump

    from flashgen.kernels.hopper_aot import pv_overlap

    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(cubin)
        fh.flush()
        usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", fh.name],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        sass = subprocess.run([_cuobjdump(), "-sass", fh.name],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
    resources = {
        "regs": int(re.search(r"REG:(\d+)", usage).group(1)),
        "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "overlap": pv_overlap(sass),
    }
    return resources, opcode_counts(sass)


def hopper_cubin(
    spec, per_key: bool = False, cfg=None, mask_tma=None
) -> tuple[bytes, int, int | None]:
    """(cubin, shared bytes, ptxas's spill-store bytes) of the Hopper forward for `spec` with
    `cfg` (None: its head dim's `CONFIGS` entry): the PTX `hopper_aot.compile_for_sm90` gives,
    assembled for sm_90a by Triton's ptxas (`hopper_aot.assemble_sm90`). `mask_tma`: (the mask's
    dtype name, buffers a consumer) for a rendering with MASK_TMA, else None."""
    from flashgen.kernels import hopper_aot

    dtype, bufs = mask_tma or (None, 1)
    res = hopper_aot.compile_for_sm90(spec, cfg, per_key=per_key, mask_dtype=dtype,
                                      mask_bufs=bufs)  # fmt: skip
    asm = hopper_aot.assemble_sm90(res["ptx"])
    if asm is None:
        raise RuntimeError("Triton's ptxas or cuobjdump cannot be found or run")
    return asm["cubin"], int(res["shared"]), asm["spills"]


def opcode_counts(sass: str) -> collections.Counter:
    """Opcode (modifiers dropped, predicate skipped) -> count over `cuobjdump -sass` text."""
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():  # "/*0120*/  @!P0 IMAD.MOV.U32 R1, RZ, RZ, R2 ;"
        if "/*" not in line or ";" not in line:
            continue
        words = line.split("*/", 1)[1].split()
        words = words[1:] if words and words[0].startswith("@") else words
        if words:
            ops[words[0].split(".")[0]] += 1
    return ops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dropout", action="store_true")
    p.add_argument("--family", choices=("portable", "hopper"), default="portable",
                   help="hopper: the Gluon forward with its shipped config (--kernels and "
                   "--config do not apply)")  # fmt: skip
    for flag in ("--alibi", "--softcap", "--window", "--lengths"):
        p.add_argument(flag, action="store_true", help="(--family hopper) that spec flag")
    p.add_argument(
        "--attn-mask",
        choices=("bool", "add"),
        default="",
        help="(--family hopper) a mask tensor, read as a key-padding mask (MASK_PER_KEY) "
        "unless --dense",
    )
    p.add_argument("--dense", action="store_true",
                   help="(--attn-mask) read as a dense [Sq, Sk] mask: MASK_PER_KEY off")  # fmt: skip
    p.add_argument("--mask-tma", default=None, metavar="DTYPE[:BUFS]",
                   help="(--dense) the mask's tiles by the producer's TMA (FLASHGEN_MASK_TMA's "
                   "rendering, MASK_TMA = BUFS, default 1) for a mask of torch dtype DTYPE "
                   "(bool, bfloat16, float16, float32)")  # fmt: skip
    p.add_argument("--late-wait", action="store_true",
                   help="(--family hopper) the config with late_wait (PV's wait after the softmax)")  # fmt: skip
    p.add_argument("--seq", type=int, default=None, metavar="N",
                   help="(--family hopper) the config the run time launches for N query rows "
                   "(hopper.config_for on the GPU whose record FLASHGEN_GPU names, default the "
                   "H200) instead of the head dim's shipped one; not with --late-wait")  # fmt: skip
    p.add_argument("--kernels", default="attn_fwd_tma", help="comma-separated kernel names")
    p.add_argument("--config", default="64,64,4,3", help="BLOCK_M,BLOCK_N,warps,stages")
    args = p.parse_args(argv)
    if args.seq is not None and args.late_wait:
        p.error("--seq takes the run time's config as it is: not with --late-wait")
    if args.dense and not args.attn_mask:
        p.error("--dense needs --attn-mask")
    mask_tma = None
    if args.mask_tma:
        if not args.dense:
            p.error("--mask-tma needs --dense")
        import os

        os.environ["FLASHGEN_MASK_TMA"] = "1"  # (read when the kernel is rendered, below)
        dtype, _, bufs = args.mask_tma.partition(":")
        mask_tma = (dtype, int(bufs or 1))
    from flashgen.core.config import TileConfig
    from flashgen.core.spec import KernelSpec

    if args.family == "hopper":
        spec = KernelSpec(args.head_dim, args.causal, args.dtype, "fwd", args.window,
                          args.softcap, args.lengths, attn_mask=args.attn_mask,
                          dropout=args.dropout, alibi=args.alibi)  # fmt: skip
        from flashgen.kernels.hopper import CONFIGS, config_for

        if args.seq is not None:
            cfg = config_for(spec, args.seq)
        else:
            cfg = dataclasses.replace(CONFIGS[args.head_dim], late_wait=args.late_wait)
        cubin, shared, spills = hopper_cubin(
            spec, per_key=bool(args.attn_mask) and not args.dense, cfg=cfg, mask_tma=mask_tma
        )
        res, ops = sass_counts(cubin)
        counts = " ".join(f"{op}={ops[op]}" for op in OPS)
        print(f"attn_fwd_ws {spec.uri()} {cfg.short()}: regs {res['regs']} stack {res['stack']} "
              f"shared {shared} spills {spills} sass {sum(ops.values())} {counts} "
              f"overlap {res['overlap']}", flush=True)  # fmt: skip
        return 0
    from sram_vs_compiler import compile_ahead

    cfg = TileConfig(*(int(x) for x in args.config.split(",")))
    for name in args.kernels.split(","):
        direction = "fwd" if name.startswith("attn_fwd") else "bwd"
        spec = KernelSpec(head_dim=args.head_dim, causal=args.causal, dtype=args.dtype,
                          direction=direction, dropout=args.dropout)  # fmt: skip
        compiled, used = compile_ahead(spec, name, cfg, 90)
        res, ops = sass_counts(compiled.asm["cubin"])
        counts = " ".join(f"{op}={ops[op]}" for op in OPS)
        print(f"{name} {spec.uri()} config {used.short()}: regs {res['regs']} stack "
              f"{res['stack']} shared {int(compiled.metadata.shared)} sass {sum(ops.values())} "
              f"{counts}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
