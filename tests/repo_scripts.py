"""Scripts of the repository (benchmarks/, examples/) loaded as modules from their paths, so that
tests can call their pure parts; they are not packages, so `import` cannot reach them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(relpath: str, name: str | None = None):
    """The module of ROOT/`relpath`, executed afresh, named `name` (default: the file's stem)."""
    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    # registered under its name while it runs: dataclasses (and pickling) look a class's
    # module up in sys.modules
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
