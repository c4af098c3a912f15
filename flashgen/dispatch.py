"""Runtime choice of a TileConfig, and of the implementation, for one attention call.

    choose_config(spec, seq_q, seq_k) -> TileConfig
    choose_impl(spec, seq_q, seq_k, cuda) -> "flashgen" | "sdpa_cudnn" | ...   (flashgen.impls)

The implementation comes from the same lookup as the config: the record found (exact, nearest,
shipped or sibling) names the winner when the tuner compared flashgen with PyTorch's SDPA
backends (`TuningRecord.compared`); otherwise `flashgen.impls.default_impl` decides (measured
tables for known GPUs; flashgen for CPU tensors and unknown GPUs). FLASHGEN_IMPL (read on a
cache miss) or `set_impl(name)` (e.g. `flashgen.backend(impl=...)`) forces one for every call.

The hot path is one dict lookup keyed by (spec, shape bucket). The first call for a key asks
the tuning database (`flashgen.db`, imported lazily: SQLAlchemy loads only then) for
exact -> nearest -> shipped -> default -> safe, caches the answer for the life of the process,
and, when the bucket has no exact record, records it as pending (once per key per process) so
`flashgen tune --pending` can tune what real workloads used.

This function must never fail an attention call: if SQLAlchemy is missing (the GPU machine has
none unless carried), the database cannot be opened, or any query fails, it returns the space's
default config and logs at debug level. After one failure to open the database the process stops
trying until `set_db()` or `clear_cache()`, so an unreachable server costs one timeout, not one
per shape.

Configuration: FLASHGEN_DB_URL (read when the database is first needed), `set_db(url)`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from typing import Any

from .config import TileConfig
from .impls import check_impl, default_impl, forced_impl
from .spec import KernelSpec, shape_bucket

log = logging.getLogger(__name__)
# Smallest legal tile: used only if the space module itself fails (it should never be needed).
LAST_RESORT = TileConfig(16, 16, 2, 1)

_cache: dict[tuple[KernelSpec, tuple[int, int]], TileConfig] = {}
_sources: dict[tuple[KernelSpec, tuple[int, int]], str] = {}
_pending_sent: set[tuple[KernelSpec, tuple[int, int]]] = set()
_records: dict[tuple[KernelSpec, tuple[int, int]], Any] = {}  # the record found (TuningRecord)
# (spec, bucket, cuda) -> (impl, ratio to the runner-up or None, where the choice came from)
_impls: dict[tuple[KernelSpec, tuple[int, int], bool], tuple[str, float | None, str]] = {}
_lock = threading.Lock()
_state: dict = {"url": None, "db": None, "failed": False, "impl": None}


def choose_config(spec: KernelSpec, seq_q: int, seq_k: int) -> TileConfig:
    key = (spec, shape_bucket(seq_q, seq_k))
    config = _cache.get(key)
    if config is None:
        config = _miss(key)
    return config


def choose_impl(spec: KernelSpec, seq_q: int, seq_k: int, cuda: bool) -> str:
    """Which implementation runs this call (`cuda`: whether the tensors are on a CUDA GPU)."""
    choice = _impls.get((spec, shape_bucket(seq_q, seq_k), cuda))
    if choice is None:
        choice = impl_choice(spec, seq_q, seq_k, cuda)
    return choice[0]


def impl_choice(spec: KernelSpec, seq_q: int, seq_k: int, cuda: bool):
    """(impl, ratio to the runner-up or None, source) for this call; source is "forced", the
    lookup source of a record that compared implementations ("exact", "nearest", ...), or
    "default". Cached like the config."""
    key = (spec, shape_bucket(seq_q, seq_k), cuda)
    choice = _impls.get(key)
    if choice is not None:
        return choice
    forced = _state["impl"] or forced_impl()
    if forced is not None:
        choice = (forced, None, "forced")
    else:
        choose_config(spec, seq_q, seq_k)  # the lookup that finds the record, if any
        rec = _records.get(key[:2])
        if rec is not None and getattr(rec, "compared", False):
            choice = (rec.impl, rec.impl_ratio, _sources.get(key[:2], "exact"))
        else:
            gpu = _gpu_name() if cuda else None
            choice = (default_impl(gpu, spec.dtype), None, "default")
    _impls[key] = choice
    return choice


def set_impl(impl: str | None) -> None:
    """Force `impl` for every call of this process (None: back to records, defaults and
    FLASHGEN_IMPL). Raises ValueError for an unknown name."""
    if impl is not None:
        check_impl(impl)
    with _lock:
        _state["impl"] = impl
        _impls.clear()


def source_of(spec: KernelSpec, seq_q: int, seq_k: int) -> str | None:
    """Where the cached config for this shape came from ("exact", ..., "safe"), if resolved."""
    return _sources.get((spec, shape_bucket(seq_q, seq_k)))


def set_db(url: str | None) -> None:
    """Use `url` from now on (None: back to FLASHGEN_DB_URL / the default file); clears caches."""
    with _lock:
        _close_db()
        _state["url"] = url
        _clear()


def clear_cache() -> None:
    """Forget every cached choice (e.g. after tuning in this process); retry a failed DB."""
    with _lock:
        _close_db()
        _clear()


def _clear() -> None:
    _cache.clear()
    _sources.clear()
    _records.clear()
    _impls.clear()
    _pending_sent.clear()
    _state["failed"] = False


def _close_db() -> None:
    db = _state.get("db")
    _state["db"] = None
    if db is not None:
        with contextlib.suppress(Exception):  # closing a broken connection must not raise
            db.close()


def _database():
    """The shared TuningDB, opened on first need; None when it cannot be opened."""
    if _state["db"] is not None and _state.get("pid") != os.getpid():
        # A forked child (DataLoader worker, multiprocessing) must not share the parent's
        # pooled connections: drop them without closing the parent's, open its own.
        with contextlib.suppress(Exception):
            _state["db"].engine.dispose(close=False)
        _state["db"] = None
    if _state["db"] is not None or _state["failed"]:
        return _state["db"]
    try:
        from .db import connect

        _state["db"] = connect(_state["url"])
        _state["pid"] = os.getpid()
    except Exception as exc:  # ImportError, DatabaseError, driver errors alike
        _state["failed"] = True
        log.debug("flashgen: tuning database unavailable, using default configs: %s", exc)
    return _state["db"]


def _fallback(spec: KernelSpec) -> tuple[TileConfig, str]:
    from .space import default_config, safe_config

    for choose, source in ((default_config, "default"), (safe_config, "safe")):
        try:
            return choose(spec), source
        except Exception as exc:  # a broken defaults table still must not fail the call
            log.debug("flashgen: %s(%s) failed: %s", choose.__name__, spec.uri(), exc)
    return LAST_RESORT, "safe"


def _miss(key: tuple[KernelSpec, tuple[int, int]]) -> TileConfig:
    spec, bucket = key
    with _lock:
        config = _cache.get(key)
        if config is not None:
            return config
        source = "default"
        try:
            db = _database()
            if db is None:
                config, source = _fallback(spec)
            else:
                found = db.lookup(spec, bucket[0], bucket[1])
                config, source = found.config, found.source
                _records[key] = found.record
                if source != "exact" and key not in _pending_sent:
                    _pending_sent.add(key)
                    db.record_pending(spec, bucket, _gpu_name())
        except Exception as exc:  # the attention call must go on
            log.debug("flashgen: tuning lookup for %s %s failed: %s", spec.uri(), bucket, exc)
            if config is None:
                config, source = _fallback(spec)
        _cache[key] = config
        _sources[key] = source
        return config


def _gpu_name() -> str:
    from .sram import current_device

    return current_device().name
