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
def _load_files(files: tuple[tuple[str, int, int], ...]) -> tuple[TuningRecord, ...]:
    out: list[TuningRecord] = []
    for name, _mtime, _size in files:
        try:
            out.extend(load(name))
        except FormatError as exc:
            log.warning("skipping shipped tuning file %s: %s", name, exc)
    return tuple(out)


def shipped_records(directory: Path | str | None = None) -> tuple[TuningRecord, ...]:
    """All valid shipped records. Parsed files are cached by (path, mtime, size), so a changed
    or added file is picked up while the unchanged case costs one directory listing."""
    directory = directory if directory is not None else shipped_dir()
    if directory is None or not Path(directory).is_dir():
        return ()
    files = []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((str(path), stat.st_mtime_ns, stat.st_size))
    return _load_files(tuple(files))
