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


def _lazy(name: str):
    if name == "attention":
        from .ops import attention

        return attention
    if name == "attention_varlen":
        from .ops import attention_varlen

        return attention_varlen
    if name == "backend":
        from .compile.backend import backend

        return backend
    if name == "explain":
        from .compile.backend import explain

        return explain
    if name == "KernelSpec":
        from .core.spec import KernelSpec

        return KernelSpec
    if name == "TileConfig":
        from .core.config import TileConfig

        return TileConfig
    raise AttributeError(f"module 'flashgen' has no attribute {name!r}")
