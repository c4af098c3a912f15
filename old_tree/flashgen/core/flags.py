"""Command-line flags as tables: rows of (flag, argparse options, help) that `add_flags` adds
to a parser or one of its argument groups.

Why: the flashgen commands (`flashgen tune`, `kernel`, `bench`, `python -m flashgen.tune.decode`)
declare a few dozen flags between them; as rows of one table each, a flag is one entry to read
and edit instead of an `add_argument` call repeated per flag. No imports: the CLI loads it
before anything heavy.
"""

from __future__ import annotations

SWITCH = {"action": "store_true"}  # an on/off flag (False unless given)


def add_flags(parser, rows) -> None:
    """Add each (flag, options, help) row to `parser` (an ArgumentParser or argument group), in
    order: the order `--help` lists them in. `help` None: the flag is listed without one."""
    for flag, options, text in rows:
        parser.add_argument(flag, **options, help=text)
