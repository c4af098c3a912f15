"""Runtime choice of a TileConfig, and of the implementation, for one attention call.

    choose_config(spec, seq_q, seq_k) -> TileConfig
    choose_impl(spec, seq_q, seq_k, cuda) -> "flashgen" | "sdpa_cudnn" | ...   (flashgen.core.impls)

The implementation comes from the same lookup as the config: the record found (exact, nearest,
shipped or sibling) names the winner when the tuner compared flashgen with PyTorch's SDPA
backends (`TuningRecord.compared`); otherwise `flashgen.core.impls.default_impl` decides (measured
tables for known GPUs; flashgen for CPU tensors and unknown GPUs). FLASHGEN_IMPL (read on a
cache miss) or `set_impl(name)` (e.g. `flashgen.backend(impl=...)`) forces one for every call.

The hot path is one dict lookup keyed by (spec, shape bucket). The first call for a key asks
the tuning database (`flashgen.db`, imported lazily: SQLAlchemy loads only then) for
exact -> nearest -> shipped -> default -> safe, caches the answer for the life of the process,
and, when the bucket has no exact record, records it as pending (once per key per process) so
`flashgen tune --pending` can tune what real workloads used.

This function must never fail or stall an attention call because of the database:
- its connection waits at most a few milliseconds for a lock another process holds (a tuner,
  an import; `connect(runtime=True)`), and a couple of seconds to reach a server;
- when the database cannot be opened (locked, corrupt, unreachable) or a query fails, the call
  uses the fallback order without the database (the space's default, else the safe config),
  and ONE warning per process and database names it; later faults log at debug level;
- that fallback answer (and the implementation chosen with it) is not cached for good: the
  same key asks the database again after RETRY_AFTER_S, and opening a database that failed is
  retried after RETRY_AFTER_S, doubling with each consecutive failure up to MAX_RETRY_AFTER_S
  (an unreachable server costs one connect timeout per retry, not one per call).
Without SQLAlchemy (the GPU machine has none unless carried) the default is used, logged at
debug level only: that is an installation choice, not a fault.

A call made while a CUDA graph is being captured passes `query_db=False`: a cached choice is
used as usual, a miss gets the defaults table's config without touching the database and is not
cached (the next ordinary call resolves it). Launchers that cache per-shape launch plans register
`on_clear` so that `set_db()` / `clear_cache()` reach them too.

Configuration: FLASHGEN_DB_URL (read when the database is first needed), `set_db(url)`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.config import TileConfig
from ..core.impls import FLASHGEN, check_impl, default_impl, forced_impl
from ..core.spec import KernelSpec, shape_bucket
from .lookup import fallback, lookup

log = logging.getLogger(__name__)
# flashgen's kernel must beat the fastest SDPA backend by this much to be chosen (`decisive`).
FLASHGEN_MARGIN = 1.05

RETRY_AFTER_S = 30.0
MAX_RETRY_AFTER_S = 600.0
_clock = time.monotonic  # the retry clock (tests let time pass through it)
_FALLING_BACK = "attention uses the untuned fallback configs meanwhile and asks the database again"

Key = tuple[KernelSpec, tuple[int, int]]
_cache: dict[Key, TileConfig] = {}
_sources: dict[Key, str] = {}
# Fallback answers given because of a database fault: (config, monotonic time to ask again).
_degraded: dict[Key, tuple[TileConfig, float]] = {}
_pending_sent: set[Key] = set()
_records: dict[Key, Any] = {}  # the record found (TuningRecord)
# (spec, bucket, cuda) -> (impl, ratio to the runner-up or None, where the choice came from)
ImplKey = tuple[KernelSpec, tuple[int, int], bool]
ImplChoice = tuple[str, float | None, str]
_impls: dict[ImplKey, ImplChoice] = {}
# Choices made while the config key is degraded: (choice, when to ask again, as `_degraded`).
_impls_degraded: dict[ImplKey, tuple[ImplChoice, float]] = {}
# What `remember_impl` keeps: a caller's own key (exact sizes, no spec or bucket to build) ->
# impl, for choices cached for good in `_impls`; emptied with it.
settled_impls: dict[tuple, str] = {}
MAX_SETTLED = 4096
_lock = threading.Lock()
# retry_at: when opening the database may be tried again (0: now; inf: never, no SQLAlchemy);
# open_failures: consecutive failures to open it; warned: databases already warned about, by
# process id (a forked child warns for itself).
_state: dict = {
    "url": None,
    "db": None,
    "impl": None,
    "retry_at": 0.0,
    "open_failures": 0,
    "warned": set(),
}
_clear_hooks: list[Callable[[], None]] = []


def choose_config(spec: KernelSpec, seq_q: int, seq_k: int, *, query_db: bool = True) -> TileConfig:
    key = (spec, shape_bucket(seq_q, seq_k))
    config = _cache.get(key)
    if config is None:
        config = _miss(key) if query_db else fallback(spec).config
    return config


def choose_impl(spec: KernelSpec, seq_q: int, seq_k: int, cuda: bool, *, query_db=True) -> str:
    """Which implementation runs this call (`cuda`: whether the tensors are on a CUDA GPU).
    `query_db`: False while a CUDA graph is captured (`impl_choice`), or a callable returning
    that, asked on a cache miss only (the hot path stays one dict lookup)."""
    choice = _impls.get((spec, shape_bucket(seq_q, seq_k), cuda))
    if choice is None:
        choice = impl_choice(spec, seq_q, seq_k, cuda, query_db=query_db)
    return choice[0]


def remember_impl(
    key: tuple, spec: KernelSpec, seq_q: int, seq_k: int, cuda: bool, *, query_db=True
):
    """`choose_impl`, and when its answer is cached for good (not a fallback held during a
    database fault, not a capture-time default) also under `key` in `settled_impls`, so the
    caller's next call with that key is one dict lookup (`flashgen.runtime.vendor.winner`:
    building the spec and the shape bucket cost microseconds on every call)."""
    impl = choose_impl(spec, seq_q, seq_k, cuda, query_db=query_db)
    if (spec, shape_bucket(seq_q, seq_k), cuda) in _impls:
        if len(settled_impls) >= MAX_SETTLED:
            settled_impls.clear()
        settled_impls[key] = impl
    return impl


def impl_choice(spec: KernelSpec, seq_q: int, seq_k: int, cuda: bool, *, query_db=True):
    """(impl, ratio to the runner-up or None, source) for this call; source is "forced", the
    lookup source of a record that compared implementations ("exact", "nearest", ...), or
    "default". Cached like the config. `query_db=False` (a CUDA graph is being captured): a
    miss is answered from what is cached and the defaults, without the database, and is not
    cached (the next ordinary call asks the database); or a callable returning that, asked only
    when the answer is not cached or forced."""
    key = (spec, shape_bucket(seq_q, seq_k), cuda)
    choice = _cached(key, _impls, _impls_degraded)
    if choice is not None:
        return choice
    impl = forced()
    if impl is None and callable(query_db):
        query_db = query_db()
    if impl is not None:
        choice = (impl, None, "forced")
    elif not query_db:
        rec = _records.get(key[:2])
        if rec is not None and decisive(rec):
            return (rec.impl, rec.impl_ratio, _sources.get(key[:2], "exact"))
        return (default_impl(_gpu_name() if cuda else None, spec.dtype), None, "default")
    else:
        choose_config(spec, seq_q, seq_k)  # the lookup that finds the record, if any
        rec = _records.get(key[:2])
        if rec is not None and decisive(rec):
            choice = (rec.impl, rec.impl_ratio, _sources.get(key[:2], "exact"))
        else:
            gpu = _gpu_name() if cuda else None
            choice = (default_impl(gpu, spec.dtype), None, "default")
    degraded = _degraded.get(key[:2])
    if impl is None and degraded is not None:  # the database is at fault: ask again later
        _impls_degraded[key] = (choice, degraded[1])
    else:
        _impls[key] = choice
    return choice


def default_choice(spec: KernelSpec, cuda: bool) -> str:
    """The implementation the defaults name for `spec` (no record): on a known GPU its fastest
    SDPA backend, else flashgen's kernels (`flashgen.core.impls.default_impl`)."""
    return default_impl(_gpu_name() if cuda else None, spec.dtype)


def decisive(rec) -> bool:
    """Whether a record's winner overrides the defaults: it must come from a comparison, and
    flashgen must have won by at least FLASHGEN_MARGIN. A closer call is within the timing
    noise (on the H200 the op calling cuDNN read 0.98-1.07x of cuDNN called directly across one
    grid, benchmarks/RESULTS.md run 10), and the SDPA backend is what the user had without
    flashgen: ties go to the vendor."""
    if not getattr(rec, "compared", False):
        return False
    return rec.impl != FLASHGEN or rec.impl_ratio >= FLASHGEN_MARGIN


def forced() -> str | None:
    """The implementation every call of this process is forced to run (`set_impl`, else
    FLASHGEN_IMPL), or None for the run-time choice."""
    return _state["impl"] or forced_impl()


def set_impl(impl: str | None) -> None:
    """Force `impl` for every call of this process (None: back to records, defaults and
    FLASHGEN_IMPL). Raises ValueError for an unknown name."""
    if impl is not None:
        check_impl(impl)
    with _lock:
        _state["impl"] = impl
        _impls.clear()
        settled_impls.clear()
        _impls_degraded.clear()


def plan_config(
    spec: KernelSpec, seq_q: int, seq_k: int, *, capturing: bool
) -> tuple[TileConfig, bool]:
    """The chooser `flashgen.runtime.primitives` hands the launchers (`flashgen.kernels.plans`): the config a
    new launch plan runs with (without asking the database while a CUDA graph is captured),
    and whether it is settled (only then is the plan kept)."""
    config = choose_config(spec, seq_q, seq_k, query_db=not capturing)
    return config, settled(spec, seq_q, seq_k)


def settled(spec: KernelSpec, seq_q: int, seq_k: int) -> bool:
    """Whether the config for this shape is cached for good: not a fallback held while the
    database is at fault (asked again later) and not a capture-time default. Launchers keep
    per-shape launch plans only for settled configs."""
    return (spec, shape_bucket(seq_q, seq_k)) in _cache


def on_clear(hook: Callable[[], None]) -> None:
    """Call `hook()` whenever the cached choices are dropped (`set_db`, `clear_cache`)."""
    _clear_hooks.append(hook)


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
    settled_impls.clear()
    _impls_degraded.clear()
    _degraded.clear()
    _pending_sent.clear()
    _state["retry_at"] = 0.0
    _state["open_failures"] = 0
    for hook in _clear_hooks:
        hook()


def _close_db() -> None:
    db = _state.get("db")
    _state["db"] = None
    if db is not None:
        with contextlib.suppress(Exception):  # closing a broken connection must not raise
            db.close()


def _database():
    """The shared TuningDB, opened on first need; None when it cannot be opened now."""
    if _state["db"] is not None and _state.get("pid") != os.getpid():
        # A forked child (DataLoader worker, multiprocessing) must not share the parent's
        # pooled connections: drop them without closing the parent's, open its own.
        with contextlib.suppress(Exception):
            _state["db"].engine.dispose(close=False)
        _state["db"] = None
    if _state["db"] is not None or _clock() < _state["retry_at"]:
        return _state["db"]
    try:
        from ..db import connect
    except ImportError as exc:
        _state["retry_at"] = math.inf
        log.debug("flashgen: no tuning database (%s), using default configs", exc)
        return None
    try:
        _state["db"] = connect(_state["url"], runtime=True)
        _state["pid"] = os.getpid()
        _state["open_failures"] = 0
    except Exception as exc:  # DatabaseError, driver errors alike
        failures = _state["open_failures"] = _state["open_failures"] + 1
        wait = min(RETRY_AFTER_S * 2 ** (failures - 1), MAX_RETRY_AFTER_S)
        _state["retry_at"] = _clock() + wait
        problem = _short(exc)
        if _database_name() not in problem:
            problem = f"cannot open tuning database {_database_name()}: {problem}"
        _warn_once(problem, f"{_FALLING_BACK} in {wait:.0f} s")
    return _state["db"]


def _database_name() -> str:
    from ..db.urls import mask_url, resolve_url

    return mask_url(resolve_url(_state["url"]))


def _short(exc: BaseException) -> str:
    """The first line of a driver error (no SQL, no parameters), the password masked."""
    from ..db.urls import resolve_url, scrub

    text = str(getattr(exc, "orig", None) or exc).strip()
    text = text.splitlines()[0] if text else type(exc).__name__
    return scrub(text, resolve_url(_state["url"]))


def _warn_once(problem: str, effect: str) -> None:
    """One warning per process and database; the same database's later faults: debug."""
    key = (os.getpid(), _database_name())
    if key in _state["warned"]:
        log.debug("flashgen: %s; %s", problem, effect)
        return
    _state["warned"].add(key)
    log.warning(
        "flashgen: %s; %s. Later faults of this database are logged at debug level only.",
        problem,
        effect,
    )


def _cached(key, settled: dict, degraded: dict):
    """What is cached for `key`: the settled answer, else the degraded one (held while the
    database is at fault) until its time to ask again; None: ask. One rule for the configs and
    the implementation choices, so both retry the database at the same time."""
    found = settled.get(key)
    if found is not None:
        return found
    held = degraded.get(key)
    if held is not None and _clock() < held[1]:
        return held[0]
    return None


def _miss(key: Key) -> TileConfig:
    spec, bucket = key
    with _lock:
        config = _cached(key, _cache, _degraded)
        if config is not None:
            return config
        db = _database()
        if db is None and _state["retry_at"] == math.inf:  # no SQLAlchemy: final answer
            found = fallback(spec)
            _cache[key], _sources[key] = found.config, found.source
            config = found.config
            return config
        if db is None:
            return _degrade(key, "no database")
        try:
            found = lookup(db, spec, bucket[0], bucket[1])
        except Exception as exc:  # the attention call must go on
            _warn_once(
                f"tuning database {db.url_safe}: lookup failed: {_short(exc)}",
                f"{_FALLING_BACK} in {RETRY_AFTER_S:.0f} s",
            )
            return _degrade(key, "lookup failed")
        config, source = found.config, found.source
        _records[key] = found.record
        if source != "exact" and key not in _pending_sent:
            _pending_sent.add(key)
            try:
                db.record_pending(spec, bucket, _gpu_name())
            except Exception as exc:  # the lookup's answer stands; only the note is lost
                _warn_once(
                    f"tuning database {db.url_safe}: recording shape {bucket[0]}x{bucket[1]} "
                    f"as pending failed: {_short(exc)}",
                    "the config it found is used; `flashgen tune --pending` will not see this "
                    "shape",
                )
        _cache[key] = config
        _sources[key] = source
        _degraded.pop(key, None)
        return config


def _degrade(key: Key, why: str) -> TileConfig:
    """The fallback order without the database, remembered until the key may ask again."""
    found = fallback(key[0])
    config, source = found.config, found.source
    _degraded[key] = (config, _clock() + RETRY_AFTER_S)
    _sources[key] = source
    log.debug("flashgen: %s for %s %s: %s config", why, key[0].uri(), key[1], source)
    return config


def _gpu_name() -> str:
    from ..hardware.sram import current_device

    return current_device().name
