"""Versions of the software a tuned record depends on, read without importing it.

A tuning record is only exact for the code that was timed. The versions come from package
metadata (`importlib.metadata`) instead of `import torch` / `import triton`, so the runtime
lookup and `flashgen db` stay fast and work where a package is missing ("none").
"""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def package_version(name: str) -> str:
    """Installed version of distribution `name`, or "none" when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def flashgen_version() -> str:
    from .. import __version__

    return __version__


def template_hash_or_none() -> str:
    """Hash of the kernel templates; "none" where they cannot be found (a broken install)."""
    from ..kernels.codegen import template_hash

    try:
        return template_hash()
    except (FileNotFoundError, OSError):
        return "none"
