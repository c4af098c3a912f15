"""Print the generated Triton source for one kernel spec, e.g.
`flashgen kernel --head-dim 128 --causal --dtype bfloat16 [--direction bwd]`."""

from __future__ import annotations

import argparse

from .spec import DIRECTIONS, DTYPES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--head-dim", type=int, required=True, help="head dim, 16..256")
    parser.add_argument("--causal", action="store_true", help="causal (SDPA is_causal) masking")
    parser.add_argument("--dtype", choices=DTYPES, default="float16")
    parser.add_argument("--direction", choices=DIRECTIONS, default="fwd")
    parser.add_argument("--path", action="store_true", help="print the cached file's path instead")


def run(args: argparse.Namespace) -> int:
    from .codegen import kernel_path, load, render
    from .spec import KernelSpec

    spec = KernelSpec(args.head_dim, args.causal, args.dtype, args.direction)
    source = render(spec)
    if args.path:
        load(spec)
        print(kernel_path(spec, source))
    else:
        print(source, end="")
    return 0
