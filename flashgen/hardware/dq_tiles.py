"""The split backward's dQ-kernel config for a backward config chosen at run time.

A backward `TileConfig` (a tuning record, a default, a tuner trial) names the dK/dV kernel's
tiles. The dQ kernel holds other things across its loop (Q, dO and one fp32 accumulator of its
query rows, against K, V and two accumulators in dK/dV), and timed alone on the H200 its best
config barely moves: (128, 64) with 3 stages (8 warps at head dim 128, 4 at 64) was the fastest
or within 1-8% of the fastest at every length (1k/4k/16k) and causal mode, while the dK/dV
kernel's best changes with head dim and causal mode (benchmarks/RESULTS.md, B2 sweep: the dQ
kernel 5-15% faster than on the dK/dV kernel's config at 16k). So on sm_90, for the 16-bit specs
of head dim 64 and 128, the dQ kernel runs that measured config; everywhere else (other GPUs,
fp32, other head dims) it runs the backward config itself. The variants whose dQ kernel holds
nothing more in shared memory than the plain one (window, softcap, lengths, ALiBi: run-time
scalars, a [B, 4] bounds row, one slope) take it too; a mask tensor (a [BLOCK_M, BLOCK_N] tile
per step, pipelined like K and V) and dropout (its counters) keep the backward config.
"""

from __future__ import annotations

from ..core.config import TileConfig
from ..core.spec import KernelSpec

SM90_DQ = {64: TileConfig(128, 64, 4, 3), 128: TileConfig(128, 64, 8, 3)}


def dq_config(spec: KernelSpec, cfg: TileConfig, capability: tuple[int, int] | None) -> TileConfig:
    """The dQ kernel's config for backward config `cfg` of `spec` on a GPU of `capability`
    (None: unknown, `cfg` itself)."""
    if capability is None or capability[0] != 9 or spec.dtype == "float32":
        return cfg
    if spec.attn_mask or spec.dropout:
        return cfg
    return SM90_DQ.get(spec.head_dim, cfg)
