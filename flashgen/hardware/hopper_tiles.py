"""The Hopper family's knob space and its fit model: which `HopperConfig`s exist for a head dim,
and which fit a GPU, decided without compiling (the same job `tiles` and `sram` do for the
portable family).

Why a separate model: the Gluon kernel allocates its shared memory explicitly (Q and O staging
per consumer, the K/V ring, mbarriers: `HopperConfig.shared_bytes`, which the compiler matched
within alignment padding, tests/kernels/test_hopper.py), and its registers are fixed by the
launch cap and the partitions' setmaxnreg, not by the tile alone. What the model cannot see is
whether the consumers' registers hold the score, P and O tiles without spilling: `spill_risk`
estimates that, and the ahead-of-time test checks ptxas's spill count for the configs it admits.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

from ..core.hopper_config import (
    BLOCK_N,
    NUM_BUF,
    HopperConfig,
    max_regs,
)
from .configs_files import configs_file, read_configs
from .sram import DeviceLimits

# Shared memory an SM has for all resident programs, and what the runtime reserves per program
# (sm_90: 228 KiB per SM, 1 KiB reserved per block).
SMEM_PER_SM = 233_472
SMEM_RESERVED_PER_PROGRAM = 1024
# Registers the least-served consumer thread gets after setmaxnreg, by the number of consumer
# warpgroups: the template gives the worker consumers 240 (two) or 160 (three) and the loader
# 40; the default partition (consumer 0) gets what is left, 224 or 152 (read off the PTX).
CONSUMER_REGS = {2: 224, 3: 152}
LOADER_REGS = 40
# Registers a consumer thread needs beyond its S, P and O tiles (indices, m/l, addresses), as
# read off ptxas -v for compiled configs: 3 consumers at 160 registers spilled 16 bytes with
# 112 tile registers (hd128, 64-key tiles) and 52 with 128 (hd64, 128-key tiles); 2 consumers
# at 240 with 160 tile registers spilled none.
OVERHEAD_REGS = 48


def consumer_regs(cfg: HopperConfig) -> int:
    """Registers a consumer thread works with. Several consumers: the template's setmaxnreg
    figure. One consumer: what the program's share of the register file leaves after the
    loader's warpgroup dropped to LOADER_REGS (a multiple of 8, at most 248)."""
    if cfg.consumers in CONSUMER_REGS:
        return CONSUMER_REGS[cfg.consumers]
    program = cfg.threads() * cfg.maxnreg - 128 * LOADER_REGS
    return min(248, program // (32 * cfg.num_warps) // 8 * 8)


def tile_regs(cfg: HopperConfig, head_dim: int) -> int:
    """fp32 registers a consumer thread holds for S (M_C x block_n), P (16-bit, half) and
    O (M_C x head_dim): the wgmma accumulators spread over the consumer's threads."""
    threads = 32 * cfg.num_warps
    rows = cfg.rows_per_consumer
    s = rows * cfg.block_n // threads
    o = rows * head_dim // threads
    return s + s // 2 + o


def spill_risk(cfg: HopperConfig, head_dim: int) -> bool:
    return tile_regs(cfg, head_dim) + OVERHEAD_REGS >= consumer_regs(cfg)


def programs_per_sm(cfg: HopperConfig, head_dim: int, smem_per_sm: int = SMEM_PER_SM) -> int:
    """Programs one SM holds at once (registers, shared memory): the persistent grid launches
    this many per SM."""
    by_regs = 65_536 // (cfg.threads() * cfg.maxnreg)
    by_smem = smem_per_sm // (cfg.shared_bytes(head_dim) + SMEM_RESERVED_PER_PROGRAM)
    return max(1, min(by_regs, by_smem))


def fit_reason(
    cfg: HopperConfig, head_dim: int, device: DeviceLimits, alibi: bool = False,
    alibi_mma: bool = False,
) -> str | None:  # fmt: skip
    """Why `cfg` cannot run well on `device` for this head dim (`alibi`, `alibi_mma`: in an
    ALiBi rendering, whose shared memory differs: `HopperConfig.shared_bytes`); None if it
    fits."""
    if device.capability != (9, 0):
        return f"the Hopper family needs sm_90 (wgmma, setmaxnreg), not sm_{device.capability_str}"
    need = cfg.shared_bytes(head_dim, alibi=alibi, alibi_mma=alibi_mma)
    if need > device.smem_optin_bytes:
        return f"{need} bytes of shared memory > {device.smem_optin_bytes}"
    if spill_risk(cfg, head_dim):
        return (f"consumer tiles need ~{tile_regs(cfg, head_dim) + OVERHEAD_REGS} registers a "
                f"thread > {consumer_regs(cfg)}")  # fmt: skip
    return None


# (persistent, dynamic, tail_split): the grids a config can launch; a persistent grid may
# split its last, partial round over key tiles (up to 8 chunks, where `hopper.tail_splits`
# finds it pays: the non-causal renderings without masks).
GRIDS = ((False, False, 1), (True, False, 1), (True, True, 1), (True, False, 8), (True, True, 8))


@functools.cache
def candidates(head_dim: int) -> tuple[HopperConfig, ...]:
    """Every config of the knob space for this head dim (tiles, ring slots, consumers, launch
    register cap, ping-pong, grid: one program per item, persistent, persistent taking items
    dynamically, either persistent one splitting its last round or not; PV's wait pinned
    after the softmax or not), before the device's fit test.
    The register cap is the largest the threads allow, and for one 4-warp consumer also 128
    (two programs per SM)."""
    out = []
    for consumers, warps in ((1, 4), (1, 8), (2, 4), (3, 4)):
        caps = {max_regs(consumers, warps)}
        if (consumers, warps) == (1, 4):
            caps.add(128)
        for maxnreg in sorted(caps):
            for block_n in BLOCK_N:
                for num_buf in NUM_BUF:
                    for pingpong in (False, True) if consumers == 2 else (False,):
                        for (persistent, dynamic, split), late in itertools.product(
                            GRIDS, (False, True)
                        ):
                            out.append(HopperConfig(
                                consumers * 16 * warps, block_n, num_buf, consumers, warps,
                                maxnreg, pingpong, persistent, dynamic, late, split))  # fmt: skip
    return tuple(out)


def fitting(head_dim: int, device: DeviceLimits) -> list[HopperConfig]:
    return [c for c in candidates(head_dim) if fit_reason(c, head_dim, device) is None]


# ---- measured configs per (head dim, causal, query-length bucket) -----------------------------

CONFIGS_ENV = "FLASHGEN_HOPPER_CONFIGS"
CONFIGS_FORMAT = "flashgen-hopper-configs-1"


def seq_bucket(seq_q: int) -> int:
    """The power of two at or above seq_q (at least 16): the key of a configs-file record."""
    return max(16, 1 << max(0, seq_q - 1).bit_length())


def _configs_path(device: DeviceLimits) -> Path | None:
    return configs_file(CONFIGS_ENV, "hopper", device)


@functools.lru_cache(maxsize=8)
def _table(path: str) -> dict[tuple[int, bool, int], HopperConfig]:
    """{(head_dim, causal, seq bucket): config} from a Hopper configs file (what
    benchmarks/hopper_tune.py writes); {} with a warning when it cannot be read or is not one.
    Every config goes through HopperConfig's validation: only ints and bools reach a kernel."""
    return read_configs(path, CONFIGS_FORMAT, "Hopper", _entry)


def _entry(rec: dict) -> tuple[tuple[int, bool, int], HopperConfig]:
    key = (rec["head_dim"], rec["causal"], rec["seq_bucket"])
    if not (type(key[0]) is int and type(key[1]) is bool and type(key[2]) is int):
        raise ValueError(f"a record's key is not (int, bool, int): {key!r}")
    return key, HopperConfig(**rec["config"])


def tuned_config(
    head_dim: int, causal: bool, seq_q: int, device: DeviceLimits
) -> HopperConfig | None:
    """The measured config for this head dim, mask and query length: the record of the nearest
    bucket (in log2 distance, ties to the longer) in the configs file for this GPU model, if it
    fits; None without one."""
    path = _configs_path(device)
    if path is None:
        return None
    table = _table(str(path))
    mine = [(b, c) for (d, cz, b), c in table.items() if d == head_dim and cz == causal]
    if not mine:
        return None
    want = seq_bucket(seq_q).bit_length()
    bucket, cfg = min(mine, key=lambda bc: (abs(bc[0].bit_length() - want), -bc[0]))
    return cfg if fit_reason(cfg, head_dim, device) is None else None
