"""Tuning records that ship with flashgen (`tuning_db/*.json`): a read-only layer under the DB.

The directory is `flashgen/tuning_db` inside an installed wheel (the build maps the top-level
`tuning_db/` there) or `tuning_db/` beside the package in a checkout; `FLASHGEN_SHIPPED_DIR`
overrides both. Files are validated like `flashgen db import` input; a file that fails is skipped
with a warning instead of breaking the attention call that triggered the lookup.
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from .portable import FormatError, load
from .records import TuningRecord

log = logging.getLogger(__name__)
ENV_VAR = "FLASHGEN_SHIPPED_DIR"


def shipped_dir() -> Path | None:
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        return Path(explicit).expanduser()
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "tuning_db", package.parent / "tuning_db"):
        if candidate.is_dir():
            return candidate
    return None


@functools.lru_cache(maxsize=8)
def _load_dir(directory: str) -> tuple[TuningRecord, ...]:
    out: list[TuningRecord] = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            out.extend(load(path))
        except FormatError as exc:
            log.warning("skipping shipped tuning file %s: %s", path, exc)
    return tuple(out)


def shipped_records(directory: Path | str | None = None) -> tuple[TuningRecord, ...]:
    """All valid shipped records (cached per directory for the life of the process)."""
    directory = directory if directory is not None else shipped_dir()
    if directory is None or not Path(directory).is_dir():
        return ()
    return _load_dir(str(Path(directory).resolve()))
