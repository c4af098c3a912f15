"""An environment variable set for the length of a block, then restored.

Why its own piece: flashgen reads FLASHGEN_* variables at call time (the launchers key their
plans on them) and a child process inherits the parent's environment when it is spawned, so
benchmarks time one setting against another in one process, and the tuner pins each worker to
its GPU, by setting a variable around a block. One definition of "set, then put back exactly
as it was (unset if it was unset)" instead of a copy in each caller.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def set_env(name: str, value: str | None) -> Iterator[None]:
    """os.environ[name] = value inside the block (None: left alone), then back to what it was."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
