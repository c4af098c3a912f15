"""Shared-memory (SRAM) budget model. CONTRACT STUB: the SRAM issue fills this in.

Public interface (keep these names and signatures):

    @dataclass(frozen=True) class DeviceLimits:
        name: str; capability: tuple[int, int]; sm_count: int; smem_optin_bytes: int;
        regs_per_sm: int; max_regs_per_thread: int
    KNOWN_GPUS: dict[str, DeviceLimits]          # keyed by slug, e.g. "nvidia-h200"
    def current_device() -> DeviceLimits          # reads the CUDA device; FLASHGEN_GPU=<slug>
                                                  # overrides; without CUDA returns KNOWN_GPUS
                                                  # ["nvidia-h200"]-like planning target (see doc)
    def smem_bytes(spec: KernelSpec, cfg: TileConfig) -> int
    def reg_estimate(spec, cfg) -> int            # per-thread registers, approximate
    def fits(spec, cfg, device: DeviceLimits) -> bool
"""

from __future__ import annotations
