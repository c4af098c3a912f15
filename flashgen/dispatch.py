"""Runtime choice of a TileConfig for one attention call.

    choose_config(spec, seq_q, seq_k) -> TileConfig

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

from .config import TileConfig
from .spec import KernelSpec, shape_bucket

log = logging.getLogger(__name__)
# Smallest legal tile: used only if the space module itself fails (it should never be needed).
LAST_RESORT = TileConfig(16, 16, 2, 1)

_cache: dict[tuple[KernelSpec, tuple[int, int]], TileConfig] = {}
_sources: dict[tuple[KernelSpec, tuple[int, int]], str] = {}
_pending_sent: set[tuple[KernelSpec, tuple[int, int]]] = set()
_lock = threading.Lock()
_state: dict = {"url": None, "db": None, "failed": False}


def choose_config(spec: KernelSpec, seq_q: int, seq_k: int) -> TileConfig:
    key = (spec, shape_bucket(seq_q, seq_k))
    config = _cache.get(key)
    if config is None:
        config = _miss(key)
    return config


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
