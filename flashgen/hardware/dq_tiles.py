"""The split backward's dQ-kernel config for a backward config chosen at run time.

A backward `TileConfig` (a tuning record, a default, a tuner trial) names the dK/dV kernel's
tiles. The dQ kernel holds other things across its loop (Q, dO and one fp32 accumulator of its
query rows, against K, V and two accumulators in dK/dV), and timed alone on the H200 its best
config barely moves: (128, 64) with 3 stages (8 warps at head dim 128, 4 at 64) was the fastest
or within 1-8% of the fastest at every length (1k/4k/16k) and causal mode, while the dK/dV
kernel's best changes with head dim and causal mode (benchmarks/RESULTS.md, B2 sweep: the dQ
kernel 5-15% faster than on the dK/dV kernel's config at 16k). So on sm_90, for the 16-bit specs
of head dim 64 and 128, the dQ kernel runs that measured config; everywhere else (other GPUs,
fp32, other head dims) it runs the backward config itself. Of the variants, those measured
with it take it: window, lengths and ALiBi (H200, B4 H16/4 4k hd128, benchmarks/RESULTS.md
session 12 B2: the non-causal dQ kernel 41-43% faster than on the dK/dV kernel's 64x128
config, causal ones level) and boolean mask tensors (one byte a score: a [128, 64] tile per
stage fits beside it) and dropout (its keep tile's scratch fits beside it, where on the
dK/dV kernel's (64, 128, 8, 3) at head dim 128 it does not: 238,592 B compiled). Softcap keeps
the backward config (its causal dQ kernel was 12% slower on this one), as do additive masks
(4 bytes a score: the pipelined bias tiles would not fit).
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
    if spec.softcap or spec.attn_mask == "add":
        return cfg
    return SM90_DQ.get(spec.head_dim, cfg)
