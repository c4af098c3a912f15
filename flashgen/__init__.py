"""flashgen: generated, tuned Triton FlashAttention kernels and a torch.compile backend.

`import flashgen` is light: torch, Triton, Optuna and SQLAlchemy load only when used.
"""

from __future__ import annotations

from .core.version import VERSION as __version__

__all__ = ["attention", "backend", "explain", "KernelSpec", "TileConfig", "__version__"]


def __getattr__(name: str):
    if name == "attention":
        from .ops import attention

        return attention
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
