"""Where flashgen keeps files: one place decides, environment variables override.

FLASHGEN_CACHE_DIR: generated kernels and the default database (default
$XDG_CACHE_HOME/flashgen, else ~/.cache/flashgen).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    explicit = os.environ.get("FLASHGEN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "flashgen"


def kernel_dir() -> Path:
    return cache_dir() / "kernels"


def templates_dir() -> Path:
    """The Jinja2 templates: inside the package when installed from a wheel, else the checkout.

    The wheel maps the top-level `templates/` into `flashgen/templates`; an editable install or
    a plain checkout has them beside the package.
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "templates", here.parent / "templates"):
        if candidate.is_dir() and any(candidate.glob("*.py.jinja")):
            return candidate
    raise FileNotFoundError(f"flashgen templates not found next to {here}")


def interpret_mode() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
