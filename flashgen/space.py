"""Search space and defaults. CONTRACT STUB: the SRAM/space issue fills this in.

Public interface (keep these names and signatures):

    BLOCK_CHOICES = (16, 32, 64, 128, 256); WARP_CHOICES = (2, 4, 8); STAGE_CHOICES = (1,2,3,4,5)
    def candidates(spec: KernelSpec) -> list[TileConfig]    # static rules only, no device
    def pruned(spec, device: DeviceLimits) -> list[TileConfig]   # candidates that fit;
                                        # raises NoConfigFits (a ValueError) naming spec and limit
    def default_config(spec, device: DeviceLimits | None = None) -> TileConfig
    def safe_config(spec) -> TileConfig      # small blocks that fit every known GPU
"""

from __future__ import annotations

from .config import TileConfig
from .spec import KernelSpec


def default_config(spec: KernelSpec, device=None) -> TileConfig:
    """Temporary default until the space issue lands: small, safe everywhere."""
    return safe_config(spec)


def safe_config(spec: KernelSpec) -> TileConfig:
    block = 32 if spec.block_d <= 128 else 16
    return TileConfig(block, block, 4, 1)
