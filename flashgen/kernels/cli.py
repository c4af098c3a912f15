"""Print the generated source for one kernel spec, e.g.
`flashgen kernel --head-dim 128 --causal --dtype bfloat16 [--direction bwd] [--family hopper]`
(`--family decode`: the split-KV decode kernels of a forward spec; `--window`, `--softcap`,
`--alibi`, `--attn-mask bool|add`, `--lengths`, `--dropout`: the masked variants, which
combine). The names in it are explained in templates/README.md."""

from __future__ import annotations

import argparse
import sys

from ..core.flags import SWITCH, add_flags
from ..core.spec import DIRECTIONS, DTYPES

# (flag, argparse options, help) rows (`flashgen.core.flags`), in --help order.
_FLAGS = (
    ("--head-dim", {"type": int, "required": True}, "head dim, 16..256"),
    ("--causal", SWITCH, "causal (SDPA is_causal) masking"),
    ("--dtype", {"choices": DTYPES, "default": "float16"}, None),
    ("--direction", {"choices": DIRECTIONS, "default": "fwd"}, None),
    ("--window", SWITCH, "the sliding-window kernel (the band's sizes are run-time arguments)"),
    ("--softcap", SWITCH, "the logit-softcapping kernel (the cap is a run-time argument)"),
    ("--family", {"choices": ("portable", "hopper", "decode", "onepass", "hopper_bwd"),
                  "default": "portable"},
     "kernel family: the portable Triton kernels, the Hopper (sm_90) warp-specialised "
     "Gluon forward (head dim 64/128, fp16/bf16; needs a Triton with Gluon), the split-KV "
     "decode kernels for queries of 1-16 rows (forward; --causal: a causal offset argument), "
     "the one-pass backward (--direction bwd; the non-deterministic backward kind), or the "
     "Hopper warp-specialised Gluon backward (--direction bwd, head dim 64/128, fp16/bf16; "
     "the 'hopper' backward kind)"),
    ("--lengths", SWITCH, "the kernel with per-sequence lengths (padding)"),
    ("--packed", SWITCH, "the kernel over packed variable-length sequences (implies --lengths; "
     "portable family; flashgen.attention_varlen)"),
    ("--dropout", SWITCH, "the attention-dropout kernel (p and the seed are run-time arguments)"),
    ("--alibi", SWITCH, "the ALiBi kernel (slopes are run-time arguments)"),
    ("--attn-mask", {"choices": ("bool", "add"), "default": ""},
     "the kernel reading a mask tensor (attn_mask=): boolean (False hides a key) or additive "
     "(a bias on the scaled scores)"),
    ("--path", SWITCH, "print the cached file's path instead"),
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, _FLAGS)


def run(args: argparse.Namespace) -> int:
    from ..core.spec import KernelSpec
    from .codegen import kernel_path, load_family, render

    try:
        spec = KernelSpec(
            args.head_dim, args.causal, args.dtype, args.direction, args.window, args.softcap,
            args.lengths or getattr(args, "packed", False), dropout=getattr(args, "dropout", False),
            packed=getattr(args, "packed", False), alibi=getattr(args, "alibi", False),
            attn_mask=getattr(args, "attn_mask", "") or "",
        )  # fmt: skip
    except ValueError as exc:
        print(f"flashgen kernel: {exc}", file=sys.stderr)
        return 2
    if spec.packed and args.family != "portable":
        print("flashgen kernel: packed sequences have portable kernels only", file=sys.stderr)
        return 2
    if args.family == "hopper":
        from .hopper import spec_reason

        reason = spec_reason(spec, forced=True)
        if reason is not None:
            print(f"flashgen kernel: no Hopper kernel for {spec.uri()}: {reason}", file=sys.stderr)
            return 2
    if args.family == "hopper_bwd":
        from .hopper_bwd import spec_reason as bwd_reason

        reason = bwd_reason(spec)
        if reason is not None:
            print(f"flashgen kernel: no Hopper backward for {spec.uri()}: {reason}",
                  file=sys.stderr)  # fmt: skip
            return 2
    if args.family == "decode" and (
        args.direction != "fwd" or args.window or args.softcap or args.lengths or spec.dropout
    ):
        print(
            "flashgen kernel: the decode family has forward kernels only, without window or "
            "softcap (or lengths, dropout)",
            file=sys.stderr,
        )
        return 2
    if args.family == "onepass" and args.direction != "bwd":
        print(
            "flashgen kernel: the onepass family is a backward (--direction bwd)", file=sys.stderr
        )
        return 2
    try:
        source = render(spec, args.family)
    except ValueError as exc:  # a family without this combination (its render says which)
        print(f"flashgen kernel: {exc}", file=sys.stderr)
        return 2
    if args.path:
        load_family(spec, args.family)
        print(kernel_path(spec, source, args.family))
    else:
        print(source, end="")
    return 0
