"""The `flashgen` command: wiring only.

Each subcommand lives in the module that owns its work and exposes two functions,
`add_arguments(parser)` and `run(args) -> int`. Those modules import their heavy
dependencies (Optuna, SQLAlchemy, torch) inside `run`, so `flashgen --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

SUBCOMMANDS = {
    "kernel": ("flashgen.kernels.cli", "print the generated Triton source for a kernel spec"),
    "tune": (
        "flashgen.tune.cli",
        "search tile configs per GPU and shape; write the tuning database",
    ),
    "db": ("flashgen.db.cli", "show, export, import and merge tuning databases"),
    "bench": (
        "flashgen.bench.cli",
        "time flashgen, the SDPA backends and FlexAttention side by side (needs a GPU)",
    ),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s module is imported (all of them when None).

    Importing one subcommand's module per run keeps `flashgen kernel` independent of the
    database and tuner modules, and the top-level --help needs none of them.
    """
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="flashgen",
        description="Generated, tuned Triton FlashAttention kernels.",
    )
    parser.add_argument("--version", action="version", version=f"flashgen {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if command is not None and name != command:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(
            name,
            help=help_text,
            description=(module.__doc__ or help_text).strip(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in SUBCOMMANDS else "")
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `flashgen db show | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except Exception as exc:
        if not _is_user_error(exc):
            raise
        print(f"flashgen {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _is_user_error(exc: BaseException) -> bool:
    """Bad input or a database fault: one line (the message names the problem), no traceback.
    Checked by class name so that no database module is imported just to ask."""
    if isinstance(exc, ValueError):
        return True
    return any(
        cls.__name__ == "DatabaseError" and cls.__module__.startswith("flashgen.db.")
        for cls in type(exc).__mro__
    )


if __name__ == "__main__":
    sys.exit(main())
