"""Which config runs a shape: the ONE fallback order, for the database path and without one.

`lookup(db, spec, seq_q, seq_k)` reads this environment's records and the shipped layer from
the storage (`flashgen.db`) and applies the order below; `fallback(spec)` is its tail, which
`flashgen.runtime.dispatch` also takes when there is no database to ask.

Order (the `Lookup.source` values): "exact" record for this bucket and environment; else the
"nearest" tuned bucket of the same spec with the same fingerprint (same GPU, same code); else a
"shipped" record for the same GPU model from `tuning_db/`; else a "sibling" record: the same
kernel in the other 16-bit dtype (`KernelSpec.sibling`), this environment's first, then shipped
ones; else the space's "default"; else the "safe" config. A record whose config does not fit this GPU (`sram.fits`) is never returned:
a fingerprint can match while the limits the caller passes differ (FLASHGEN_GPU, a MIG slice).

Distance between buckets is measured in log2 steps, |dq| + |dk|, because tile choices change
with the order of magnitude of a sequence, not its absolute length. Ties prefer measured
records, then the larger bucket (its tiles were chosen for more work per program), then the
faster record.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..core.config import TileConfig
from ..core.spec import KernelSpec, shape_bucket
from ..db.records import EnvFingerprint, Lookup, TuningRecord, fingerprint_for

log = logging.getLogger(__name__)

# Smallest legal tile: used only if the space module itself fails (it should never be needed).
LAST_RESORT = TileConfig(16, 16, 2, 1)


def current_fingerprint(device=None) -> EnvFingerprint:
    """The fingerprint of this process on `device` (default: `flashgen.hardware.sram.current_device()`)."""
    if device is None:
        from ..hardware.sram import current_device

        device = current_device()
    return fingerprint_for(device)


def log2_distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    return abs(a[0].bit_length() - b[0].bit_length()) + abs(a[1].bit_length() - b[1].bit_length())


def _fits(spec: KernelSpec, config: TileConfig, device) -> bool:
    from ..hardware.sram import fits

    try:
        return bool(fits(spec, config, device))
    except ValueError:
        return False


def rank(bucket: tuple[int, int], rec: TuningRecord) -> tuple:
    """Sort key of records for `bucket`: nearest (log2 steps), measured, larger, faster first."""
    size = rec.bucket[0].bit_length() + rec.bucket[1].bit_length()
    return (log2_distance(bucket, rec.bucket), not rec.measured, -size, rec.time_ms)


def nearest(
    spec: KernelSpec, bucket: tuple[int, int], candidates: Iterable[TuningRecord], device
) -> TuningRecord | None:
    """The closest fitting record of `spec` among `candidates` (already filtered by env)."""
    ranked = sorted((r for r in candidates if r.spec == spec), key=lambda r: rank(bucket, r))
    for rec in ranked:
        if _fits(spec, rec.config, device):
            return rec
    return None


def nearest_shipped(
    spec: KernelSpec,
    bucket: tuple[int, int],
    env: EnvFingerprint,
    shipped: Iterable[TuningRecord],
    device,
) -> TuningRecord | None:
    """Shipped records of the same GPU model; same template hash first, then by distance."""
    same_gpu = [r for r in shipped if r.spec == spec and r.env.same_gpu(env)]
    same_gpu.sort(key=lambda r: (r.env.template_hash != env.template_hash, *rank(bucket, r)))
    for rec in same_gpu:
        if _fits(spec, rec.config, device):
            return rec
    return None


def fallback(spec: KernelSpec, device=None) -> Lookup:
    """The space's default config when it fits this GPU (`device` None: the current one), else
    the safe config, else `LAST_RESORT`: never raises."""
    from ..hardware.tiles import default_config, safe_config

    try:
        if device is None:
            from ..hardware.sram import current_device

            device = current_device()
        config = default_config(spec, device)
        if _fits(spec, config, device):
            return Lookup(config, "default")
    except Exception as exc:  # a broken defaults table still must not fail the call
        log.debug("flashgen: default_config(%s) failed: %s", spec.uri(), exc)
    try:
        return Lookup(safe_config(spec), "safe")
    except Exception as exc:
        log.debug("flashgen: safe_config(%s) failed: %s", spec.uri(), exc)
    return Lookup(LAST_RESORT, "safe")


def resolve(
    spec: KernelSpec,
    bucket: tuple[int, int],
    env: EnvFingerprint,
    device,
    same_env: Iterable[TuningRecord],
    shipped: Iterable[TuningRecord],
) -> Lookup:
    """The lookup order of the module docstring. `same_env`: this environment's records of
    `spec` and of its sibling dtype; `shipped`: the shipped layer (any GPU)."""
    mine = [r for r in same_env if r.env == env]
    exact = next((r for r in mine if r.spec == spec and r.bucket == bucket), None)
    if exact is not None and _fits(spec, exact.config, device):
        return Lookup(exact.config, "exact", exact)
    near = nearest(spec, bucket, (r for r in mine if r.bucket != bucket), device)
    if near is not None:
        return Lookup(near.config, "nearest", near)
    shipped = list(shipped)
    ship = nearest_shipped(spec, bucket, env, shipped, device)
    if ship is not None:
        return Lookup(ship.config, "shipped", ship)
    sibling = spec.sibling()
    if sibling is not None:
        found = nearest(sibling, bucket, mine, device) or nearest_shipped(
            sibling, bucket, env, shipped, device
        )
        if found is not None and _fits(spec, found.config, device):
            return Lookup(found.config, "sibling", found)
    return fallback(spec, device)


def lookup(db, spec: KernelSpec, seq_q: int, seq_k: int, device=None) -> Lookup:
    """The config for `spec` at (seq_q, seq_k) on `device` (default: the current GPU) from the
    tuning database `db` (a `flashgen.db.TuningDB`), in the order of the module docstring."""
    if device is None:
        from ..hardware.sram import current_device

        device = current_device()
    env = current_fingerprint(device)
    # This environment's records of the spec and of its sibling dtype (the "sibling" step).
    specs = [s for s in (spec, spec.sibling()) if s is not None]
    same_env = db.env_records(specs, env)
    return resolve(spec, shape_bucket(seq_q, seq_k), env, device, same_env, db.shipped())
