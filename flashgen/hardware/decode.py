"""Split-KV decode: its launch parameters, shape buckets, shared-memory model and defaults.

The decode kernels (templates/attn_decode.py.jinja) are memory bound: a step reads the whole KV
cache once and does little math per byte. What makes them fast is enough programs in flight to
keep HBM busy, which at batch 1 means splitting the keys across programs (flash-decoding), and
enough bytes in flight per program (BLOCK_N x stages). So a decode config is a tile plus a
split count, and its shape bucket is (batch, key length), not (query length, key length):
the query is 1-16 rows and the grid is batch x kv heads x splits.

Public interface:
    DecodeConfig                          validated ints (they come from tuning, like TileConfig)
    MAX_DECODE_Q                          longest query the decode path takes (16)
    decode_bucket(batch, seq_k)           the shape key: powers of two, ceil
    row_block(group, seq_q)               BLOCK_M for GROUP x SEQ_Q packed rows
    smem_bytes(head_dim, dtype, cfg, block_m) / fits(...)
    candidates(head_dim, dtype, block_m, seq_k, device)
    default_config(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from ..core.config import ALLOWED_WARPS, MAX_BLOCK, MIN_BLOCK, FieldError, _is_pow2
from ..core.spec import next_pow2
from .sram import ELEM_BYTES, DeviceLimits, current_device

MAX_DECODE_Q = 16
MAX_SPLITS = 256
MAX_BLOCK_M = 64  # more packed rows than this take another row block (grid axis 2)
BLOCK_N_CHOICES = (32, 64, 128)
WARP_CHOICES = (2, 4, 8)
STAGE_CHOICES = (2, 3, 4)
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
# A split shorter than this spends more on its prologue, epilogue and the combine than on keys.
MIN_KEYS_PER_SPLIT = 256
# Programs per SM the default aims for: enough loads in flight to cover HBM latency.
PROGRAMS_PER_SM = 2


@dataclass(frozen=True, order=True)
class DecodeConfig:
    """block_n: keys per step; num_splits: key splits (programs per kv head and row block)."""

    block_n: int
    num_warps: int
    num_stages: int
    num_splits: int

    def __post_init__(self) -> None:
        for name in ("block_n", "num_warps", "num_stages", "num_splits"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise FieldError(name, f"DecodeConfig.{name} must be an int, got {value!r}")
        if not (_is_pow2(self.block_n) and MIN_BLOCK <= self.block_n <= MAX_BLOCK):
            raise FieldError(
                "block_n",
                f"DecodeConfig.block_n must be a power of two in [{MIN_BLOCK}, {MAX_BLOCK}], "
                f"got {self.block_n}",
            )
        if self.num_warps not in ALLOWED_WARPS:
            raise FieldError("num_warps", f"DecodeConfig.num_warps must be one of {ALLOWED_WARPS}")
        if not 1 <= self.num_stages <= 8:
            raise FieldError("num_stages", "DecodeConfig.num_stages must be in [1, 8]")
        if not 1 <= self.num_splits <= MAX_SPLITS:
            raise FieldError("num_splits", f"DecodeConfig.num_splits must be in [1, {MAX_SPLITS}]")

    def short(self) -> str:
        return f"(n{self.block_n},w{self.num_warps},s{self.num_stages},x{self.num_splits})"


def decode_bucket(batch: int, seq_k: int) -> tuple[int, int]:
    """Decode configs are tuned per (batch, key length), each rounded up to a power of two."""
    return next_pow2(batch), next_pow2(seq_k)


def row_block(group: int, seq_q: int) -> int:
    """BLOCK_M for GROUP query heads x SEQ_Q positions packed into one tile (tl.dot needs 16)."""
    return min(max(MIN_BLOCK, next_pow2(group * seq_q)), MAX_BLOCK_M)


def smem_bytes(head_dim: int, dtype: str, cfg: DecodeConfig, block_m: int) -> int:
    """Shared memory of the split kernel: K and V tiles pipelined over `num_stages` buffers,
    the resident Q tile, and the small scratch the forward model also counts (1 KB + 4 B per
    row). The same shape as the forward's loop (flashgen.hardware.sram) with a short Q."""
    elem = ELEM_BYTES[dtype]
    block_d = next_pow2(head_dim)
    kv = 2 * cfg.block_n * block_d * elem * max(cfg.num_stages - 1, 1)
    return kv + block_m * block_d * elem + 1024 + 4 * block_m


def fits(head_dim: int, dtype: str, cfg: DecodeConfig, block_m: int, device: DeviceLimits) -> bool:
    return smem_bytes(head_dim, dtype, cfg, block_m) <= device.smem_optin_bytes


def candidates(
    head_dim: int, dtype: str, block_m: int, seq_k: int, device: DeviceLimits | None = None
) -> list[DecodeConfig]:
    """Every config worth timing for this case: fits the device, no split shorter than
    MIN_KEYS_PER_SPLIT (except one split), and never empty (the smallest tile with one split
    fits every GPU flashgen knows)."""
    device = device or current_device()
    most = max(1, seq_k // MIN_KEYS_PER_SPLIT)
    out = [
        DecodeConfig(bn, w, s, x)
        for bn, w, s, x in itertools.product(
            BLOCK_N_CHOICES, WARP_CHOICES, STAGE_CHOICES, SPLIT_CHOICES
        )
        if x <= most and fits(head_dim, dtype, DecodeConfig(bn, w, s, x), block_m, device)
    ]
    return out or [DecodeConfig(32, 4, 2, 1)]


def _splits(programs: int, seq_k: int, sm_count: int) -> int:
    """Splits that bring `programs` (batch x kv heads x row blocks) up to PROGRAMS_PER_SM per
    SM, without splits shorter than MIN_KEYS_PER_SPLIT; a power of two."""
    want = -(-PROGRAMS_PER_SM * sm_count // max(programs, 1))
    most = max(1, seq_k // MIN_KEYS_PER_SPLIT)
    return max(1, min(next_pow2(want), 1 << (most.bit_length() - 1), MAX_SPLITS))


@functools.lru_cache(maxsize=1024)
def default_config(
    head_dim: int,
    dtype: str,
    batch: int,
    hkv: int,
    group: int,
    seq_q: int,
    seq_k: int,
    device: DeviceLimits | None = None,
) -> DecodeConfig:
    """The config used without a tuned one: BLOCK_N 64 with 3 stages (2 stages for head dims
    above 128, 4 bytes wide or where it does not fit), 4 warps, and enough splits to fill the
    GPU (`_splits`). Keyed by the bucket's upper corner so one bucket has one config."""
    device = device or current_device()
    batch, seq_k = decode_bucket(batch, seq_k)
    block_m = row_block(group, seq_q)
    programs = batch * hkv * -(-group * seq_q // block_m)
    splits = _splits(programs, seq_k, device.sm_count)
    big = next_pow2(head_dim) > 128 or ELEM_BYTES[dtype] == 4
    for cfg in (
        DecodeConfig(32 if big else 64, 4, 2 if big else 3, splits),
        DecodeConfig(32, 4, 2, splits),
        DecodeConfig(16, 4, 1, splits),
    ):
        if fits(head_dim, dtype, cfg, block_m, device):
            return cfg
    return DecodeConfig(16, 4, 1, splits)
