"""The split backward's dQ-kernel config for a backward config chosen at run time.

A backward `TileConfig` (a tuning record, a default, a tuner trial) names the dK/dV kernel's tiles.
The dQ kernel holds other things across its loop (Q, dO and one fp32 accumulator of its query rows,
against K, V and two accumulators in dK/dV), and timed alone on the H200 its best config barely
moves: (128, 64) with 3 stages (8 warps at head dim 128, 4 at 64) was the fastest or within 1-8% of
the fastest at every length (1k/4k/16k) and causal mode, while the dK/dV kernel's best changes with
head dim and causal mode (benchmarks/RESULTS.md, B2 sweep: the dQ kernel 5-15% faster than on the
dK/dV kernel's config at 16k). So on sm_90, for the plain 16-bit specs of head dim 64 and 128, the
dQ kernel runs that measured config; everywhere else (other GPUs, fp32, other head dims) it runs
the backward config itself. Of the variants (window, lengths, ALiBi, boolean masks, dropout), the
non-causal ones take it too: on the H200 (B4 H16/4 4k hd128, benchmarks/RESULTS.md session 12)
their dQ kernel ran 41-43% faster than on the dK/dV kernel's (64, 128, 8, 3) (two-sided window, key
lengths, ALiBi), and non-causal dropout's forward+backward 8.9 ms against 13.3 (its keep tile
pushes that config's dQ kernel past the shared-memory limit, so the default fell to (128, 128, 8,
2)). Causal ones keep the backward config: there it read level to 16% slower (window 256: 0.81 ms
against 0.70 forward+backward; dropout 3% slower; softcap's dQ kernel 12% slower). Softcap keeps it
either way, and so do additive mask tensors that vary along the query rows (4 bytes a score: the
pipelined bias tiles would not fit beside it); an additive key-padding mask (`per_key`: one vector
of keys a tile, as a boolean one) takes it like a boolean one (session 17 B4: HF's additive
padding's forward+backward 4.47 ms against 3.97 for the same padding as a boolean mask, whose
non-causal dQ kernel ran this config; B6: 4.00 ms with this rule). A sliding window alone at
head dim 128 runs (64, 64, 4, 2) either way (SM90_WINDOW_DQ): timed alone per config (session 13
B2, benchmarks/masked_tiles.py) it was the fastest for causal windows of 256 and 1024 keys and 9%
faster than (128, 64, 8, 3) for a two-sided (512, 512) one; the dK/dV kernel's window row,
(32, 64, 4, 3), made causal windows' dQ kernel 75-85% slower.
"""

from __future__ import annotations

from ..core.config import TileConfig
from ..core.spec import KernelSpec, mask_variant

SM90_DQ = {64: TileConfig(128, 64, 4, 3), 128: TileConfig(128, 64, 8, 3)}
SM90_WINDOW_DQ = {128: TileConfig(64, 64, 4, 2)}


def dq_config(
    spec: KernelSpec, cfg: TileConfig, capability: tuple[int, int] | None, per_key: bool = False
) -> TileConfig:
    """The dQ kernel's config for backward config `cfg` of `spec` on a GPU of `capability`
    (None: unknown, `cfg` itself); `per_key`: the spec's mask tensor is a key-padding mask."""
    if capability is None or capability[0] != 9 or spec.dtype == "float32":
        return cfg
    if mask_variant(spec) == "window" and spec.head_dim in SM90_WINDOW_DQ:
        return SM90_WINDOW_DQ[spec.head_dim]
    masked = (
        spec.window or spec.softcap or spec.lengths or spec.attn_mask or spec.dropout or spec.alibi
    )
    if masked and (spec.causal or spec.softcap or (spec.attn_mask == "add" and not per_key)):
        return cfg
    return SM90_DQ.get(spec.head_dim, cfg)
