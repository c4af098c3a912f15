"""Time flashgen's kernels, each SDPA backend and FlexAttention side by side on a grid of shapes.

Every implementation runs in this one process on the same inputs; each timed output (and, with a
backward, each gradient) is first checked against a float64 reference computed in the same run,
and a figure whose check failed is marked '!' in the table. Timing: triton.testing.do_bench with
return_mode="median" (L2 flushed between runs), interleaved over --rounds rounds, median of the
rounds. TFLOP/s count 4*B*H*N^2*D for the forward (halved when causal), 2.5x that for the
backward and 3.5x for forward+backward. The batch is --batch-tokens // seq (at least 1), so
every length does about the same work.

Implementations: flashgen (its own kernels, configs from the tuning database: FLASHGEN_DB_URL or
the default SQLite file; run `flashgen tune` first for tuned figures), op (flashgen.attention's own
choice between flashgen and SDPA), sdpa_cudnn, sdpa_flash, sdpa_efficient, sdpa_math (SDPA
restricted to one backend: cuDNN, FlashAttention-2, memory-efficient, math), flex (FlexAttention compiled, block mask when causal; Dynamo reset
between shapes). A backend that does not accept a case is shown as '-'. The ratio column is the
first --impl's time over the fastest other implementation's (> 1: the first is faster).

Examples:
  flashgen bench                                   # the default grid, bf16, all modes
  flashgen bench --head-dim 128 --seq-len 4096,16384 --causal true --mode fwd_bwd \\
      --heads 32/8 --json out.json --csv out.csv --plot out.png
  flashgen bench --from out.json --plot out.png    # re-draw a plot from saved results (no GPU)

Needs a CUDA GPU (exits with status 2 and says so otherwise); --interpret runs tiny cases in
Triton's CPU interpreter to try the command out (times meaningless). Exit status 1 when an
output check failed.
"""

from __future__ import annotations

import os
import sys

from ..core.flags import SWITCH, add_flags
from .harness import DEFAULT_IMPLS, DTYPES, IMPLS, MODES


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"expected positive integers, got {text!r}")
    return values


def _choices(text: str, allowed, what: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in values if x not in allowed]
    if bad or not values:
        raise ValueError(f"{what} must be among {', '.join(allowed)}, got {text!r}")
    return list(dict.fromkeys(values))


def _heads(text: str) -> list[tuple[int, int]]:
    """'16,32/8' -> [(16, 16), (32, 8)]: query heads, or query/key-value heads for GQA."""
    pairs = []
    for part in text.split(","):
        hq, _, hkv = part.strip().partition("/")
        try:
            pair = (int(hq), int(hkv or hq))
        except ValueError:
            raise ValueError(f"--heads: expected HQ or HQ/HKV items, got {part!r}") from None
        if min(pair) < 1 or pair[0] % pair[1]:
            raise ValueError(f"--heads: {part!r}: query heads must be a multiple of kv heads")
        pairs.append(pair)
    return pairs


def _causal(text: str) -> list[bool]:
    table = {"true": [True], "false": [False], "both": [False, True]}
    if text not in table:
        raise ValueError(f"--causal must be true, false or both, got {text!r}")
    return table[text]


# The flags by --help group: (flag, argparse options, help) rows (`flashgen.core.flags`).
_GRID = (
    ("--head-dim", {"default": "64,128"}, "head dims (default: 64,128)"),
    ("--seq-len", {"default": "1024,4096,16384"}, "sequence lengths (default: 1024,4096,16384)"),
    ("--causal", {"default": "both"}, "true, false or both (default: both)"),
    ("--dtype", {"default": "bfloat16"}, f"among {', '.join(DTYPES)}"),
    ("--heads", {"default": "16"}, "HQ or HQ/HKV (GQA) items, e.g. 16,32/8 (default: 16)"),
    ("--batch-tokens", {"type": int, "default": 16384},
     "batch = this // seq, at least 1 (default: 16384)"),
)  # fmt: skip
_WHAT = (
    ("--mode", {"default": "fwd,fwd_bwd"},
     "among fwd, bwd (backward alone), fwd_bwd (default: fwd,fwd_bwd)"),
    ("--impl", {"default": ",".join(DEFAULT_IMPLS)},
     f"implementations, the first is the one the ratio is for; among {', '.join(IMPLS)} "
     f"(default: {','.join(DEFAULT_IMPLS)})"),
    ("--rounds", {"type": int, "default": 2}, "interleaved rounds (default: 2)"),
    ("--rep", {"type": int, "default": 40}, "do_bench's rep in ms per reading (default: 40)"),
)  # fmt: skip
_OUTPUT = (
    ("--json", {"metavar": "FILE"}, "write the rows and the run's metadata"),
    ("--csv", {"metavar": "FILE"}, "write the rows, one per line, with GPU/versions/commit"),
    ("--plot", {"metavar": "FILE.png"}, "TFLOP/s against length (needs matplotlib)"),
    ("--from", {"dest": "from_file", "metavar": "FILE"},
     "read rows from a JSON/CSV file written before instead of timing (no GPU needed)"),
    ("--quiet", SWITCH, "no progress bar (tqdm, on stderr)"),
)  # fmt: skip
_INTERPRET = (
    ("--interpret", SWITCH,
     "run in Triton's CPU interpreter at whatever (tiny) sizes are given: a smoke test"),
)  # fmt: skip


def add_arguments(parser) -> None:
    add_flags(parser.add_argument_group("grid (comma-separated lists)"), _GRID)
    add_flags(parser.add_argument_group("what to time"), _WHAT)
    add_flags(parser.add_argument_group("output"), _OUTPUT)
    add_flags(parser, _INTERPRET)


def parse_grid(args):
    """(cases, modes, impls) from the parsed flags; ValueError naming the flag when one is bad."""
    from .harness import case_grid

    if args.batch_tokens < 1:
        raise ValueError(f"--batch-tokens must be positive, got {args.batch_tokens}")
    if args.rounds < 1 or args.rep < 1:
        raise ValueError("--rounds and --rep must be positive")
    cases = case_grid(
        head_dims=_ints(args.head_dim),
        seqs=_ints(args.seq_len),
        causal=_causal(args.causal),
        dtypes=_choices(args.dtype, DTYPES, "--dtype"),
        heads=_heads(args.heads),
        batch_tokens=args.batch_tokens,
    )
    return cases, _choices(args.mode, MODES, "--mode"), _choices(args.impl, IMPLS, "--impl")


def run(args) -> int:
    cases, modes, impls = parse_grid(args)
    from . import report

    if args.from_file:
        rows = report.read_rows(args.from_file)
        seen = list(dict.fromkeys(r.impl for r in rows))
        impls = [i for i in impls if i in seen] + [i for i in seen if i not in impls]
        return _finish(args, rows, impls, meta={"from": args.from_file})
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if args.interpret:
        device = "cpu"
        impls = [i for i in impls if i not in ("sdpa_cudnn", "sdpa_flash")]
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print(
            "flashgen bench: no CUDA GPU here (torch.cuda.is_available() is False): the figures "
            "would mean nothing. Run it on a GPU machine, or use --interpret for a CPU smoke "
            "test, or --from FILE to re-draw saved results.",
            file=sys.stderr,
        )
        return 2
    from . import harness

    timer = harness.wall_timer() if device == "cpu" else harness.gpu_timer(args.rep)
    from tqdm import tqdm

    progress = tqdm(total=len(cases) * len(modes) * len(impls), disable=args.quiet,
                    file=sys.stderr, unit="run", dynamic_ncols=True)  # fmt: skip

    def on_row(row):
        progress.set_postfix_str(f"{row.case.label()} {row.mode} {row.impl}", refresh=False)
        progress.update()

    rows = []
    with progress:
        for case in cases:
            rows += harness.bench_case(
                case, modes, impls, device=device, timer=timer, rounds=args.rounds, on_row=on_row
            )
            if args.json:  # rewritten after every case: an interrupted run keeps what it measured
                report.write_json(args.json, rows, harness.run_meta(device))
    return _finish(args, rows, impls, meta=harness.run_meta(device))


def _finish(args, rows, impls, meta) -> int:
    from . import report

    print(report.table(rows, impls))
    if args.json and "from" not in meta:
        report.write_json(args.json, rows, meta)
    if args.csv:
        report.write_csv(args.csv, rows, None if "from" in meta else meta)
    if args.plot:
        report.plot(args.plot, rows, title=meta.get("gpu", ""))
        print(f"plot: {args.plot}")
    failed = [r for r in rows if r.ok is False]
    for r in failed:
        print(f"CHECK FAILED: {r.case.label()} {r.mode} {r.impl} {r.errors}", file=sys.stderr)
    return 1 if failed else 0
