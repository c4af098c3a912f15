"""Where flashgen keeps files: one place decides, environment variables override.

FLASHGEN_CACHE_DIR: generated kernels and the default database (default
$XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen).

An unusable cache dir (a regular file, a directory that is not writable, a path below a file)
must not break a model: flashgen then uses a private temporary directory instead and says so
once per process, naming the variable and the problem (`cache_dir`).
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from pathlib import Path

log = logging.getLogger("flashgen")


def configured_cache_dir() -> tuple[Path, str]:
    """The cache dir the environment asks for, and what set it (for messages)."""
    explicit = os.environ.get("FLASHGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser(), "FLASHGEN_CACHE_DIR"
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "flashgen", "XDG_CACHE_HOME"
    return Path.home() / ".cache" / "flashgen", "the default cache dir (from HOME)"


def cache_dir() -> Path:
    """The configured cache dir if it is (or can be made) a writable directory, else a private
    temporary directory, with one warning per process saying why. Nothing is created here
    (read-only commands must not create directories): the checks only look."""
    path, source = configured_cache_dir()
    return _usable_or_temporary(path, source)


def cache_dir_problem(path: Path) -> str | None:
    """Why `path` cannot serve as the cache dir, or None. It need not exist yet: then its
    nearest existing parent must be a writable directory. `os.access` honours read-only
    file systems, and root's permission to write anywhere (so a 0500 directory is fine for
    root, since root can write into it)."""
    try:
        if path.exists():
            if not path.is_dir():
                return "is not a directory"
            if not os.access(path, os.W_OK | os.X_OK):
                return "is not writable"
            return None
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    return f"cannot be created: {parent} is not a directory"
                if not os.access(parent, os.W_OK | os.X_OK):
                    return f"cannot be created: {parent} is not writable"
                return None
    except OSError as e:
        return f"cannot be inspected ({e.strerror or e})"
    return None


@functools.cache
def _usable_or_temporary(path: Path, source: str) -> Path:
    problem = cache_dir_problem(path)
    if problem is None:
        return path
    fallback = Path(tempfile.mkdtemp(prefix="flashgen-cache-"))
    log.warning(
        "flashgen: the cache dir %s (set by %s) %s; using the private temporary directory %s "
        "for generated kernels and the default tuning database instead (the next process will "
        "not reuse them): set FLASHGEN_CACHE_DIR to a writable directory to keep them",
        path,
        source,
        problem,
        fallback,
    )
    return fallback


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` so readers never see a partial file (generated kernels, exported
    databases): a temporary file beside it, then `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def kernel_dir() -> Path:
    return cache_dir() / "kernels"


def templates_dir() -> Path:
    """The Jinja2 templates: inside the package when installed from a wheel, else the checkout.

    The wheel maps the top-level `templates/` into `flashgen/templates`; an editable install or
    a plain checkout has them beside the package.
    """
    here = Path(__file__).resolve().parent.parent  # flashgen/, above this core/ package
    for candidate in (here / "templates", here.parent / "templates"):
        if candidate.is_dir() and any(candidate.glob("*.py.jinja")):
            return candidate
    raise FileNotFoundError(f"flashgen templates not found next to {here}")


def interpret_mode() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
