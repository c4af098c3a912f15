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
    near_default(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)   a short list to time
    programs_per_sm(head_dim, dtype, cfg, block_m, device)                   resident programs
    default_config(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)
    tuned_config(...)                     a measured config from a decode configs file, or None

Tuned configs: `python -m flashgen.tune.decode` times every candidate per bucket on a GPU and
writes a decode configs file (JSON: plain integers, validated again here through DecodeConfig).
`default_config` takes the file's config for the bucket when there is one: the file named by
FLASHGEN_DECODE_CONFIGS, else the shipped tuning_db/decode/<gpu slug>.json for this GPU model.
A missing or malformed file means no tuned configs (logged once), never a failed call.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

from ..core.config import ALLOWED_WARPS, MIN_BLOCK, check_blocks, check_kinds, check_rules
from ..core.spec import cdiv, next_pow2
from .configs_files import configs_file, read_configs
from .sram import ELEM_BYTES, DeviceLimits, current_device

CONFIGS_ENV = "FLASHGEN_DECODE_CONFIGS"
CONFIGS_FORMAT = "flashgen-decode-configs"

MAX_DECODE_Q = 16
MAX_SPLITS = 256
MAX_BLOCK_M = 64  # more packed rows than this take another row block (grid axis 2)
BLOCK_N_CHOICES = (32, 64, 128)
WARP_CHOICES = (2, 4, 8)
STAGE_CHOICES = (2, 3, 4)
SPLIT_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
# A split shorter than this spends more on its prologue, epilogue and the combine than on keys.
MIN_KEYS_PER_SPLIT = 256
# Programs per SM the default aims for (the split count is then rounded up to a power of two,
# so 1-2 per SM). With two (2-4 per SM), the fastest config of 8 of the 18 head-dim-128
# buckets tuned on the H200 was the default's own tile with half its splits, 1-12% faster
# (batch B2, benchmarks/raw/h200_decode2/); in the rest another tile won or the default had
# one split already. Fewer, longer splits keep each program's loads streaming and shrink the
# merge.
PROGRAMS_PER_SM = 1


@dataclass(frozen=True, order=True)
class DecodeConfig:
    """block_n: keys per step; num_splits: key splits (programs per kv head and row block)."""

    block_n: int
    num_warps: int
    num_stages: int
    num_splits: int

    def __post_init__(self) -> None:
        check_kinds(self)
        check_blocks(self, ("block_n",))
        check_rules(self, (
            ("num_warps", self.num_warps in ALLOWED_WARPS, f"one of {ALLOWED_WARPS}"),
            ("num_stages", 1 <= self.num_stages <= 8, "in [1, 8]"),
            ("num_splits", 1 <= self.num_splits <= MAX_SPLITS, f"in [1, {MAX_SPLITS}]"),
        ), show=False)  # fmt: skip

    def short(self) -> str:
        return f"(n{self.block_n},w{self.num_warps},s{self.num_stages},x{self.num_splits})"


def decode_bucket(batch: int, seq_k: int) -> tuple[int, int]:
    """Decode configs are tuned per (batch, key length), each rounded up to a power of two."""
    return next_pow2(batch), next_pow2(seq_k)


def row_block(group: int, seq_q: int) -> int:
    """BLOCK_M for GROUP query heads x SEQ_Q positions packed into one tile (tl.dot needs 16)."""
    return min(max(MIN_BLOCK, next_pow2(group * seq_q)), MAX_BLOCK_M)


def smem_bytes(head_dim: int, dtype: str, cfg: DecodeConfig, block_m: int) -> int:
    """Shared memory of the split kernel: K and V tiles pipelined over `num_stages` - 1
    buffers, the resident Q tile, P staged for the second product (a [BLOCK_M, BLOCK_N] tile:
    a short Q takes Triton's mma v2 path with fewer rows than BLOCK_D, like the forward model's
    case in flashgen.hardware.sram), at least the 1 KB scratch, and 4 B per row. Checked
    against Triton 3.6's compiler for sm_90 (benchmarks/decode_sram.py: 54 configs, the
    model never below the compiler, at most 64 B above)."""
    elem = ELEM_BYTES[dtype]
    block_d = next_pow2(head_dim)
    kv = 2 * cfg.block_n * block_d * elem * max(cfg.num_stages - 1, 1)
    staged = max(1024, block_m * cfg.block_n * elem)
    return kv + block_m * block_d * elem + staged + 4 * block_m


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


def _grid(batch: int, hkv: int, group: int, seq_q: int, seq_k: int) -> tuple[int, int, int, int]:
    """(batch bucket, key-length bucket, BLOCK_M, programs before splitting): what the
    heuristic and the short list both size their split counts from, so they agree."""
    batch, seq_k = decode_bucket(batch, seq_k)
    block_m = row_block(group, seq_q)
    return batch, seq_k, block_m, batch * hkv * cdiv(group * seq_q, block_m)


def _splits(programs: int, seq_k: int, sm_count: int) -> int:
    """Splits that bring `programs` (batch x kv heads x row blocks) up to PROGRAMS_PER_SM per
    SM, without splits shorter than MIN_KEYS_PER_SPLIT; a power of two."""
    want = cdiv(PROGRAMS_PER_SM * sm_count, max(programs, 1))
    most = max(1, seq_k // MIN_KEYS_PER_SPLIT)
    return max(1, min(next_pow2(want), 1 << (most.bit_length() - 1), MAX_SPLITS))


# Registers per thread the split kernel was seen to need (ptxas, d <= 128, 4 warps): a
# residency estimate, not a limit the compiler is held to.
_REGS_PER_THREAD = 128


def programs_per_sm(
    head_dim: int, dtype: str, cfg: DecodeConfig, block_m: int, device: DeviceLimits
) -> int:
    """How many split-kernel programs one SM holds at once: the smaller of what its shared
    memory and its registers allow (at least 1)."""
    by_smem = device.smem_optin_bytes // max(smem_bytes(head_dim, dtype, cfg, block_m), 1)
    by_regs = device.regs_per_sm // (_REGS_PER_THREAD * 32 * cfg.num_warps)
    return max(1, min(by_smem, by_regs))


def _whole_waves(programs: int, seq_k: int, slots: int) -> list[int]:
    """Split counts that make programs x splits fill the GPU's `slots` (SMs x programs per
    SM) in one or two whole waves: a memory-bound grid of 1.3 waves leaves most SMs idle in
    its last one (the B1 decode grid's weak shapes all had 512 programs on 396 slots)."""
    most = min(max(1, seq_k // MIN_KEYS_PER_SPLIT), MAX_SPLITS)
    out = set()
    for waves in (1, 2):
        x = (waves * slots) // max(programs, 1)
        if 1 <= x <= most:
            out.add(x)
    return sorted(out)


def near_default(
    head_dim: int, dtype: str, batch: int, hkv: int, group: int, seq_q: int, seq_k: int,
    device: DeviceLimits | None = None,
) -> list[DecodeConfig]:  # fmt: skip
    """The short list a tuner times when GPU time is scarce (`flashgen.tune.decode --space
    near`): BLOCK_N 64/128 (32 too above head dim 128) with 2-4 stages and 4 warps, each with
    the heuristic's split count, half and double it, and the counts that fill whole waves of
    resident programs. Never empty: the heuristic default is always in it."""
    device = device or current_device()
    base = heuristic_config(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)
    batch, seq_k, block_m, programs = _grid(batch, hkv, group, seq_q, seq_k)
    most = min(max(1, seq_k // MIN_KEYS_PER_SPLIT), MAX_SPLITS)
    tiles = [(64, 4, 2), (64, 4, 3), (64, 4, 4), (128, 4, 2), (128, 4, 3)]
    if next_pow2(head_dim) > 128 or ELEM_BYTES[dtype] == 4:
        tiles = [(32, 4, 2), (32, 4, 3), (64, 4, 2)]
    out = {base}
    for bn, w, st in tiles:
        tile = DecodeConfig(bn, w, st, 1)
        if not fits(head_dim, dtype, tile, block_m, device):
            continue
        slots = device.sm_count * programs_per_sm(head_dim, dtype, tile, block_m, device)
        splits = {base.num_splits, max(1, base.num_splits // 2), min(most, base.num_splits * 2)}
        splits |= set(_whole_waves(programs, seq_k, slots))
        out |= {DecodeConfig(bn, w, st, x) for x in splits if 1 <= x <= most}
    return sorted(out)


@functools.lru_cache(maxsize=1024)
def default_config(
    head_dim: int, dtype: str, batch: int, hkv: int, group: int, seq_q: int, seq_k: int,
    device: DeviceLimits | None = None,
) -> DecodeConfig:  # fmt: skip
    """The config used without a tuned one: BLOCK_N 64 with 3 stages (2 stages for head dims
    above 128, 4 bytes wide or where it does not fit), 4 warps, and enough splits to fill the
    GPU (`_splits`). Keyed by the bucket's upper corner so one bucket has one config."""
    device = device or current_device()
    tuned = tuned_config(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)
    if tuned is not None:
        return tuned
    return heuristic_config(head_dim, dtype, batch, hkv, group, seq_q, seq_k, device)


@functools.lru_cache(maxsize=1024)
def heuristic_config(
    head_dim: int, dtype: str, batch: int, hkv: int, group: int, seq_q: int, seq_k: int,
    device: DeviceLimits | None = None,
) -> DecodeConfig:  # fmt: skip
    """`default_config` without a decode configs file (what a tuner starts from)."""
    device = device or current_device()
    batch, seq_k, block_m, programs = _grid(batch, hkv, group, seq_q, seq_k)
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


def _configs_path(device: DeviceLimits) -> Path | None:
    return configs_file(CONFIGS_ENV, "decode", device)


@functools.lru_cache(maxsize=8)
def _table(path: str) -> dict[tuple, DecodeConfig]:
    """{(head_dim, dtype, hkv, group, batch bucket, kv bucket): config} from a decode configs
    file; {} (logged) when it cannot be read or is not one."""
    return read_configs(path, CONFIGS_FORMAT, "decode", _entry)


def _entry(rec: dict) -> tuple[tuple, DecodeConfig]:
    c = rec["config"]
    cfg = DecodeConfig(c["block_n"], c["num_warps"], c["num_stages"], c["num_splits"])
    b, kv = rec["bucket"]
    key = (rec["head_dim"], rec["dtype"], rec["hkv"], rec["group"], b, kv)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (*key[2:], key[0])):
        raise ValueError(f"a record's key is not integers: {key!r}")
    return key, cfg


def tuned_config(
    head_dim: int, dtype: str, batch: int, hkv: int, group: int, seq_q: int, seq_k: int,
    device: DeviceLimits | None = None,
) -> DecodeConfig | None:  # fmt: skip
    """The measured config of this decode bucket, if a decode configs file has one that fits."""
    device = device or current_device()
    path = _configs_path(device)
    if path is None:
        return None
    key = (head_dim, dtype, hkv, group, *decode_bucket(batch, seq_k))
    cfg = _table(str(path)).get(key)
    if cfg is None or not fits(head_dim, dtype, cfg, row_block(group, seq_q), device):
        return None
    return cfg
