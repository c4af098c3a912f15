"""Runtime choice of a TileConfig for one attention call. CONTRACT STUB.

The database issue replaces the body with: in-memory cache -> tuning DB (exact bucket, nearest
bucket) -> defaults table -> safe config, never querying the database on the hot path twice for
the same key. Signature to keep:

    def choose_config(spec: KernelSpec, seq_q: int, seq_k: int) -> TileConfig
"""

from __future__ import annotations

from .config import TileConfig
from .space import default_config
from .spec import KernelSpec


def choose_config(spec: KernelSpec, seq_q: int, seq_k: int) -> TileConfig:
    return default_config(spec)
