"""Plain data that crosses the database boundary: fingerprints, records, trials, lookups.

These are frozen dataclasses with validation in `__post_init__`, and they import no SQLAlchemy,
so the tuner, the CLI and the shipped JSON layer can use them without a database. Every value
that comes back from storage is rebuilt through these classes (and `TileConfig`), which is the
Python half of the "validated twice" rule: the CHECK constraints are the other half.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import hashlib
import math
import socket
from dataclasses import dataclass, field

from ..core.config import FieldError, TileConfig
from ..core.impls import FLASHGEN, IMPLS
from ..core.spec import MIN_BUCKET, KernelSpec

SOURCES = ("exact", "nearest", "shipped", "sibling", "default", "safe")
TRIAL_STATUSES = ("ok", "pruned", "failed", "wrong")
MAX_BUCKET = 1 << 30


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _check_int(name: str, value, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(name, f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise FieldError(name, f"{name} must be >= {minimum}, got {value}")


def _check_str(name: str, value, max_len: int) -> None:
    if not isinstance(value, str) or not value or len(value) > max_len:
        raise FieldError(name, f"{name} must be a non-empty string of at most {max_len} chars")


def check_bucket(bucket) -> tuple[int, int]:
    """A shape bucket is two powers of two >= MIN_BUCKET (what `spec.shape_bucket` makes)."""
    if not isinstance(bucket, (tuple, list)) or len(bucket) != 2:
        raise FieldError("bucket", f"bucket must be a pair of ints, got {bucket!r}")
    for value in bucket:
        _check_int("bucket", value, MIN_BUCKET)
        if value & (value - 1) or value > MAX_BUCKET:
            raise FieldError("bucket", f"bucket values must be powers of two <= 2**30, got {value}")
    return int(bucket[0]), int(bucket[1])


def check_time(name: str, value, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(name, f"{name} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise FieldError(name, f"{name} must be > 0, got {value}")
    if value < 0:
        raise FieldError(name, f"{name} must be >= 0, got {value}")
    return float(value)


@dataclass(frozen=True)
class EnvFingerprint:
    """Everything that makes a timing valid: the GPU and the exact code that ran on it.

    Two records with different fingerprints are different records; `key()` is the short,
    stable digest the database uniques on. `same_gpu()` ignores the software versions and is
    what the shipped layer matches on.
    """

    gpu_name: str
    capability: str
    sm_count: int
    smem_optin: int
    triton_version: str
    torch_version: str
    flashgen_version: str
    template_hash: str

    def __post_init__(self) -> None:
        for name in ("gpu_name", "triton_version", "torch_version", "flashgen_version"):
            _check_str(name, getattr(self, name), 128)
        _check_str("template_hash", self.template_hash, 64)
        _check_str("capability", self.capability, 8)
        major, _, minor = self.capability.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            raise FieldError(
                "capability", f"capability must look like '9.0', got {self.capability!r}"
            )
        _check_int("sm_count", self.sm_count, 1)
        _check_int("smem_optin", self.smem_optin, 1)

    def key(self) -> str:
        parts = (
            self.gpu_name,
            self.capability,
            str(self.sm_count),
            str(self.smem_optin),
            self.triton_version,
            self.torch_version,
            self.flashgen_version,
            self.template_hash,
        )
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]

    def same_gpu(self, other: EnvFingerprint) -> bool:
        return (self.gpu_name, self.capability, self.sm_count, self.smem_optin) == (
            other.gpu_name,
            other.capability,
            other.sm_count,
            other.smem_optin,
        )

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class TuningRecord:
    """The winning config for one (spec, shape bucket, environment) and how it was found.

    measured=False marks a config chosen by the cost model without GPU timing; a measured record
    always beats a modelled one in the keep-best rule, whatever the times say.

    `config` and `time_ms` are always flashgen's own best kernel (the kernel work needs it even
    where a vendor kernel is faster). `impl` names the implementation that won when the tuner
    also timed PyTorch's SDPA backends on the same case (one of `flashgen.core.impls.IMPLS`), and
    `impl_ratio` >= 1 is the runner-up's time over the winner's, from the same back-to-back
    timing. impl_ratio None means no comparison was made (a modelled record, an interrupted
    run, a file from before the comparison existed): then `impl` is "flashgen" and the run-time
    choice takes the defaults (`flashgen.core.impls.default_impl`) instead of trusting it.
    """

    spec: KernelSpec
    bucket: tuple[int, int]
    env: EnvFingerprint
    config: TileConfig
    time_ms: float
    tflops: float = 0.0
    n_trials: int = 0
    measured: bool = True
    host: str = field(default_factory=socket.gethostname)
    created_at: _dt.datetime = field(default_factory=_utcnow)
    impl: str = FLASHGEN
    impl_ratio: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.spec, KernelSpec):
            raise ValueError(f"spec must be a KernelSpec, got {self.spec!r}")
        if not isinstance(self.env, EnvFingerprint):
            raise ValueError(f"env must be an EnvFingerprint, got {self.env!r}")
        if not isinstance(self.config, TileConfig):
            raise ValueError(f"config must be a TileConfig, got {self.config!r}")
        object.__setattr__(self, "bucket", check_bucket(self.bucket))
        object.__setattr__(self, "time_ms", check_time("time_ms", self.time_ms, positive=True))
        object.__setattr__(self, "tflops", check_time("tflops", self.tflops, positive=False))
        _check_int("n_trials", self.n_trials, 0)
        if not isinstance(self.measured, bool):
            raise FieldError("measured", f"measured must be a bool, got {self.measured!r}")
        _check_str("host", self.host, 255)
        if not isinstance(self.created_at, _dt.datetime):
            raise FieldError(
                "created_at", f"created_at must be a datetime, got {self.created_at!r}"
            )
        if self.created_at.tzinfo is None:
            object.__setattr__(self, "created_at", self.created_at.replace(tzinfo=_dt.timezone.utc))
        if self.impl not in IMPLS:
            raise FieldError("impl", f"impl must be one of {', '.join(IMPLS)}, got {self.impl!r}")
        if self.impl_ratio is None:
            if self.impl != FLASHGEN:
                raise FieldError("impl_ratio", f"impl {self.impl!r} needs an impl_ratio")
        else:
            ratio = check_time("impl_ratio", self.impl_ratio, positive=True)
            if ratio < 1.0:
                raise FieldError("impl_ratio", f"impl_ratio must be >= 1, got {ratio}")
            object.__setattr__(self, "impl_ratio", ratio)

    @property
    def compared(self) -> bool:
        """Whether `impl` is the outcome of timing flashgen against the SDPA backends."""
        return self.impl_ratio is not None

    def beats(self, other: TuningRecord) -> bool:
        """The keep-best rule in Python (the SQL upsert implements the same rule)."""
        if self.measured != other.measured:
            return self.measured
        return self.time_ms < other.time_ms


@dataclass(frozen=True)
class Trial:
    """One candidate the tuner tried. status "ok" carries a time; the others may carry an error."""

    config: TileConfig
    time_ms: float | None
    status: str = "ok"
    error: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.config, TileConfig):
            raise ValueError(f"config must be a TileConfig, got {self.config!r}")
        if self.status not in TRIAL_STATUSES:
            raise ValueError(f"status must be one of {TRIAL_STATUSES}, got {self.status!r}")
        if self.time_ms is not None:
            object.__setattr__(self, "time_ms", check_time("time_ms", self.time_ms, positive=True))
        elif self.status == "ok":
            raise ValueError("a trial with status 'ok' needs a time_ms")
        if not isinstance(self.error, str):
            raise ValueError("error must be a string")


@dataclass(frozen=True)
class Lookup:
    """The answer to "which config for this call?" and where it came from (one of SOURCES)."""

    config: TileConfig
    source: str
    record: TuningRecord | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")


@functools.lru_cache(maxsize=16)
def fingerprint_for(device) -> EnvFingerprint:
    """The fingerprint of this process on `device` (a `flashgen.hardware.sram.DeviceLimits`, or
    anything with its name, capability, sm_count and smem_optin_bytes): the caller says which
    device, so storage needs no hardware model (`flashgen.runtime.lookup.current_fingerprint`
    asks for the current one)."""
    from ..core import env

    major, minor = device.capability
    return EnvFingerprint(
        gpu_name=device.name,
        capability=f"{major}.{minor}",
        sm_count=int(device.sm_count),
        smem_optin=int(device.smem_optin_bytes),
        triton_version=env.package_version("triton"),
        torch_version=env.package_version("torch"),
        flashgen_version=env.flashgen_version(),
        template_hash=env.template_hash_or_none(),
    )
