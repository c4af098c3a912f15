"""The search space: candidate TileConfigs, device pruning, and the configs used without tuning.

Why these rules: every candidate must be a config the generated kernels compile and run
correctly with; the tuner then only learns speed. `candidates` holds the static rules (no
device); `pruned` removes what the shared-memory model (flashgen.hardware.sram) says cannot launch and never
returns an empty list. `default_config` is on the runtime path (dispatch falls back to it when
nothing is tuned), so it is a table lookup plus one model check, memoised.

Public interface (cross-room contract):
    BLOCK_CHOICES, WARP_CHOICES, STAGE_CHOICES
    candidates(spec) -> list[TileConfig]
    pruned(spec, device) -> list[TileConfig]        raises NoConfigFits (a ValueError)
    default_config(spec, device=None) -> TileConfig
    safe_config(spec) -> TileConfig                  fits every GPU in sram.KNOWN_GPUS
"""

from __future__ import annotations

import csv
import functools
import itertools
from pathlib import Path

from ..core.config import TileConfig
from ..core.spec import MASK_VARIANTS, KernelSpec, mask_variant
from .sram import KNOWN_GPUS, DeviceLimits, current_device, fits, reg_estimate, smem_bytes

BLOCK_CHOICES = (16, 32, 64, 128, 256)
WARP_CHOICES = (2, 4, 8)
STAGE_CHOICES = (1, 2, 3, 4, 5)

# A thread holding more fp32 accumulator/score values than this spills heavily: such configs
# compile and run but are never fast (the H200 grid's slowest configs were of this kind).
MAX_FP32_REGS = 256 + 32
# Each thread should own at least this many scores; below it warps idle on tiny tiles.
MIN_SCORES_PER_THREAD = 4


class NoConfigFits(ValueError):
    """No candidate of a spec fits the device: names the spec and the limit."""


def _static_ok(spec: KernelSpec, cfg: TileConfig) -> bool:
    """Rules independent of the device (see module docstring)."""
    threads = 32 * cfg.num_warps
    if cfg.block_m * cfg.block_n < MIN_SCORES_PER_THREAD * threads:
        return False
    return reg_estimate(spec, cfg) <= MAX_FP32_REGS


@functools.cache
def _candidates(spec: KernelSpec) -> tuple[TileConfig, ...]:
    configs = (
        TileConfig(bm, bn, w, s)
        for bm, bn, w, s in itertools.product(
            BLOCK_CHOICES, BLOCK_CHOICES, WARP_CHOICES, STAGE_CHOICES
        )
    )
    return tuple(c for c in configs if _static_ok(spec, c))


def candidates(spec: KernelSpec) -> list[TileConfig]:
    """Every config the kernels accept for `spec` (static rules only), in a fixed order."""
    return list(_candidates(spec))


def pruned(spec: KernelSpec, device: DeviceLimits) -> list[TileConfig]:
    """Candidates that fit `device`; raises NoConfigFits rather than return an empty list."""
    kept = [c for c in _candidates(spec) if fits(spec, c, device)]
    if not kept:
        smallest = min(smem_bytes(spec, c, device.capability) for c in _candidates(spec))
        raise NoConfigFits(
            f"no config of {spec.uri()} fits {device.name}: its opt-in shared memory limit is "
            f"{device.smem_optin_bytes} bytes, the smallest candidate needs {smallest}"
        )
    return kept


def _gpu_class(device: DeviceLimits) -> str:
    """Which defaults row a device uses: by compute capability and shared-memory budget."""
    major, _ = device.capability
    if major >= 9:
        return "sm90"
    if major == 8 and device.smem_optin_bytes >= 160 * 1024:
        return "sm80"
    if major == 8:
        return "sm86"
    return "sm75"


# (gpu class, direction, causal, block_d) -> preferred configs, best first, for 16-bit dtypes.
# sm90 rows are the winners of the H200 grids measured with these templates (benchmarks/RESULTS.md,
# runs 3 and 4): forward hd128 (128,64,4,2) non-causal, (64,64,4,3) causal; forward hd64
# (64,128,4,2) both. Backward rows name the dK/dV kernel's config (on sm_90 the dQ kernel runs its
# own, flashgen.hardware.dq_tiles); the dK/dV kernel timed alone (B2 sweep, 1k/4k/16k): hd128
# (64,128,8,3) non-causal, (64,64,4,2) causal; hd64 (64,64,4,3) both (at 1k (32,64,4,3) by 3-4%).
# The rest are conservative picks that the model fits with margin; a later entry is used when an
# earlier one does not fit (fp32). The rows are data, kept in tile_defaults.csv beside this module
# (shipped in the package); read once, at import.
_T = TileConfig
_CAUSAL = {"false": (False,), "true": (True,), "both": (False, True)}


def _read_defaults(
    path: Path,
) -> dict[tuple[str, str, bool, int, str], tuple[TileConfig, ...]]:
    """{(gpu class, direction, causal, block_d, variant): configs} from the defaults file
    (format in its header; a later row replaces an earlier one's keys; an empty variant is the
    row of every spec). A malformed row raises: the file ships with the package, so an error
    in it is a packaging bug, not a run-time condition."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    table = {}
    for row in csv.DictReader(lines):
        cfgs = tuple(_T(*map(int, c.split("x"))) for c in row["configs"].split())
        variant = row.get("variant") or ""
        if variant not in MASK_VARIANTS:
            raise ValueError(f"{path.name}: unknown variant {variant!r} in {row}")
        for block_d in row["block_d"].split():
            for causal in _CAUSAL[row["causal"]]:
                table[(row["gpu_class"], row["direction"], causal, int(block_d), variant)] = cfgs
    return table


_DEFAULTS = _read_defaults(Path(__file__).with_name("tile_defaults.csv"))

# Tried in order by safe_config: the first that fits every known GPU (and the static rules).
_SAFE_ORDER = (
    _T(64, 64, 4, 2),
    _T(64, 32, 4, 2),
    _T(32, 32, 4, 2),
    _T(32, 32, 4, 1),
    _T(16, 32, 2, 1),
    _T(16, 16, 2, 1),
)


def _smallest(spec: KernelSpec) -> TileConfig:
    """The candidate with the least modelled shared memory on any compiler path."""
    return min(_candidates(spec), key=lambda c: (smem_bytes(spec, c), c))


@functools.cache
def safe_config(spec: KernelSpec) -> TileConfig:
    """A config that fits every GPU in KNOWN_GPUS (T4's 64 KB included) for `spec`.

    One spec has none by the model: the fp32 head-dim-256 backward on the T4 (K, V, Q and dO
    tiles alone are 64 KB at 16 rows; the model's smallest is a few KB more, while the compiler says
    exactly 65,536 for (16,16,2,1) on sm_75 and sm_80, Triton 3.9). There, and for any future
    such spec, the config with the least modelled shared memory is returned.
    """
    allowed = set(_candidates(spec))
    for cfg in _SAFE_ORDER:
        if cfg in allowed and all(fits(spec, cfg, d) for d in KNOWN_GPUS.values()):
            return cfg
    return _smallest(spec)


@functools.cache
def _default_for(spec: KernelSpec, device: DeviceLimits, variant: str | None = None) -> TileConfig:
    allowed = set(_candidates(spec))
    key = (_gpu_class(device), spec.direction, spec.causal, max(spec.block_d, 16))
    variant = mask_variant(spec) if variant is None else variant
    row = _DEFAULTS.get((*key, variant), ()) + _DEFAULTS.get((*key, ""), ())
    for cfg in row:
        if cfg in allowed and fits(spec, cfg, device):
            return cfg
    safe = safe_config(spec)
    if fits(spec, safe, device):
        return safe
    # A device below every known GPU's budget (FLASHGEN_SMEM_BYTES): the largest that fits;
    # when the model admits nothing, the smallest config (the runtime path must not raise).
    try:
        kept = pruned(spec, device)
    except NoConfigFits:
        return _smallest(spec)
    return max(kept, key=lambda c: (smem_bytes(spec, c, device.capability), c))


# The one-pass backward (flashgen.kernels.bwd, kind "onepass") keeps an fp32 dQ tile beside the
# dK/dV kernel's buffers, so configs chosen for the split kind may not fit it: its own rows,
# tried in order when they do not. sm90: see benchmarks/RESULTS.md (one-pass backward).
_ONEPASS_DEFAULTS: dict[tuple[str, int], tuple[TileConfig, ...]] = {
    ("sm90", 64): (_T(64, 128, 8, 2), _T(64, 64, 4, 2)),
    ("sm90", 128): (_T(64, 128, 8, 2), _T(64, 64, 4, 2)),
}


@functools.cache
def config_for_kind(
    spec: KernelSpec, cfg: TileConfig, device: DeviceLimits, kind: str
) -> TileConfig:
    """`cfg` (chosen for the split backward, the kind the tuning records time) when it fits
    the kernels of backward kind `kind` on `device`; else that kind's defaults row, then the
    split kind's row, then the safe config, then the fitting candidate with the most shared
    memory (or the smallest one when none fits: the runtime path must not raise)."""
    if kind == "split" or fits(spec, cfg, device, kind):
        return cfg
    allowed = set(_candidates(spec))
    cls = _gpu_class(device)
    row = _ONEPASS_DEFAULTS.get((cls, max(spec.block_d, 16)), ())
    row += _DEFAULTS.get((cls, spec.direction, spec.causal, max(spec.block_d, 16), ""), ())
    for option in (*row, safe_config(spec)):
        if option in allowed and fits(spec, option, device, kind):
            return option
    kept = [c for c in _candidates(spec) if fits(spec, c, device, kind)]
    if kept:
        return max(kept, key=lambda c: (smem_bytes(spec, c, device.capability, kind), c))
    return min(_candidates(spec), key=lambda c: (smem_bytes(spec, c, None, kind), c))


def default_config(
    spec: KernelSpec, device: DeviceLimits | None = None, per_key: bool = False
) -> TileConfig:
    """The config to use when nothing is tuned: the defaults row of the device's class, the first
    entry that fits; else the safe config. device=None: `sram.current_device()`. `per_key`: the
    spec's mask tensor is constant along query rows (a key-padding mask, one vector of keys a
    tile): the general rows, not the "mask" variant's, which were measured on [Sq, Sk] tiles
    (on the H200 its forward row read an additive key-padding mask 44% slower)."""
    device = device if device is not None else current_device()
    return _default_for(spec, device, "" if per_key else None)
