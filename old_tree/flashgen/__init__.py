"""flashgen: generated, tuned Triton FlashAttention kernels and a torch.compile backend.

`import flashgen` is light: torch, Triton, Optuna and SQLAlchemy load only when used.
"""

from __future__ import annotations

from .core.version import VERSION as __version__

__all__ = [
    "attention",
    "attention_varlen",
    "backend",
    "explain",
    "KernelSpec",
    "TileConfig",
    "__version__",
]


def __getattr__(name: str):
    """Import a public name on first use, then keep it as a module global: `__getattr__` runs
    only for names the module lacks, and an import statement costs microseconds, which every
    `flashgen.attention(...)` call would otherwise pay (benchmarks/RESULTS.md, host time)."""
    value = _lazy(name)
    globals()[name] = value
    return value


# Public name -> the module (relative to this package) that defines it.
_HOMES = {
    "attention": ".ops",
    "attention_varlen": ".ops",
    "backend": ".compile.backend",
    "explain": ".compile.backend",
    "KernelSpec": ".core.spec",
    "TileConfig": ".core.config",
}


def _lazy(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'flashgen' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(home, __name__), name)
