"""Versions of the software a tuned record depends on, read without importing it.

A tuning record is only exact for the code that was timed. The versions come from package
metadata (`importlib.metadata`) instead of `import torch` / `import triton`, so the runtime
lookup and `flashgen db` stay fast and work where a package is missing ("none").
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata

from .paths import templates_dir
from .version import VERSION


@functools.cache
def package_version(name: str) -> str:
    """Installed version of distribution `name`, or "none" when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def flashgen_version() -> str:
    return VERSION


@functools.lru_cache(maxsize=1)
def template_hash() -> str:
    """Hash of every kernel template file: part of cache and database keys, so a record is
    exact only for the templates that were timed."""
    digest = hashlib.sha256()
    for path in sorted(templates_dir().glob("*.py.jinja")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def template_hash_or_none() -> str:
    """Hash of the kernel templates; "none" where they cannot be found (a broken install)."""
    try:
        return template_hash()
    except (FileNotFoundError, OSError):
        return "none"
