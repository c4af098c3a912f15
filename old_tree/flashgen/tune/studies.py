"""Where the tuner's Optuna studies live, and the heartbeats that let a cluster share them.

One study per (spec, bucket, environment), named by `study_name`, so every process that tunes
the same thing on the same kind of GPU and software joins the same study. `open_storage` picks
the storage from the tuning database's URL (PostgreSQL: shared, with heartbeats; SQLite: in
memory, rebuilt from flashgen's own trials table (`join_study`, `history_trials`); SQLite with several worker
processes on this host: one Optuna journal file per run, rebuilt the same way, `join_study`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
import weakref
from typing import TYPE_CHECKING

from ..core.spec import KernelSpec
from .space import PARAMS

if TYPE_CHECKING:
    from .space import Space

# The replay lock of each journal storage `open_storage` made (see `join_study`).
_JOURNAL_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
HEARTBEAT_INTERVAL_S = 30
HEARTBEAT_GRACE_S = 120


def study_name(spec: KernelSpec, bucket: tuple[int, int], env_key: str) -> str:
    """One study per (spec, bucket, environment): the same on every host that should join it."""
    return f"flashgen:{spec.uri()}:{bucket[0]}x{bucket[1]}:{env_key}"


def open_storage(
    db,
    *,
    workers: int = 1,
    journal: str | None = None,
    heartbeat_interval: int = HEARTBEAT_INTERVAL_S,
    grace_period: int = HEARTBEAT_GRACE_S,
):
    """The Optuna storage for studies next to the tuning DB `db` (a flashgen.db.TuningDB).

    - PostgreSQL: `RDBStorage` on the same URL, with heartbeats; a trial whose worker stops
      beating for `grace_period` seconds is failed and re-queued once
      (RetryHeartbeatStaleTrialCallback) so another worker runs it. Any number of processes and
      hosts may share it; building the storage holds the database's schema lock
      (`flashgen.db.migrate.schema_lock`), so many processes may start together on a new
      database.
    - SQLite: Optuna's `InMemoryStorage`, one process only, so `workers > 1` without a
      `journal` is refused here. Why not Optuna's `RDBStorage` on the same SQLite file: SQLite serialises
      writers with a file lock, and Optuna's many small transactions from several processes end
      in "database is locked" (seen with eight writers on this project's machines); even for one process it commits (and fsyncs) on every
      `suggest`, which measured 6 ms a commit and ~0.3 s a trial here, as long as timing a
      candidate. Nothing is lost by keeping the study in memory: every finished trial is already
      in flashgen's trials table, and `tune_task` replays that table into a new in-memory study,
      so a re-run (or a run after Ctrl-C) resumes where the last one stopped.
    - SQLite with `journal` (a file path): several processes of one host share the studies
      through Optuna's `JournalStorage(JournalFileBackend(journal))`, an append-only log file
      under a file lock; no server. `flashgen tune --gpus/--workers` makes one per run in a
      temporary directory and removes it afterwards: as for one process, the trials table is the
      lasting history, and the first worker to open a study replays it there (`join_study`).
      The journal has no heartbeats: a worker that dies leaves its trial RUNNING for the rest of
      the run (the parent reports the death), and the next run starts from the trials table.
    """
    import optuna

    from ..db.migrate import schema_lock

    url = db.engine.url
    if db.dialect == "postgresql":
        # Optuna creates its tables and enum types on first use without a lock: on a new
        # database, processes starting together would race (UniqueViolation on
        # `studydirection`). Under the server-side schema lock the first one creates them and
        # the rest find them, on any number of hosts.
        with optuna_quiet(), schema_lock(db.engine):
            return optuna.storages.RDBStorage(
                url.render_as_string(hide_password=False),
                engine_kwargs={"pool_pre_ping": True},
                heartbeat_interval=heartbeat_interval,
                grace_period=grace_period,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                    max_retry=1
                ),
            )
    if journal is not None:
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        storage = JournalStorage(JournalFileBackend(str(journal)))
        _JOURNAL_LOCKS[storage] = f"{journal}.replay.lock"
        return storage
    check_workers(db, workers)
    return optuna.storages.InMemoryStorage()


def check_workers(db, workers: int) -> None:
    """Several processes need a storage they can share: PostgreSQL, or a journal file that
    `flashgen tune` makes per run (`open_storage(journal=...)`); an in-memory one cannot."""
    if workers > 1 and db.dialect != "postgresql":
        raise ValueError(
            f"{workers} workers on SQLite ({db.url_safe}) share their studies through a journal "
            "file (open_storage(journal=...)); an in-memory study is one process's only"
        )


def join_study(storage, name: str, sampler, history):
    """Create or load the study `name`; when it is new and lives in this run's memory or journal
    (not PostgreSQL, where the study itself is the lasting history), fill it from `history()`
    (frozen trials, `history_trials`) first. Several workers call it under `study_lock`, so
    exactly one of them replays."""
    import optuna

    study = optuna.create_study(storage=storage, sampler=sampler, study_name=name,
                                direction="minimize", load_if_exists=True)  # fmt: skip
    replayable = isinstance(storage, optuna.storages.InMemoryStorage) or storage in _JOURNAL_LOCKS
    if replayable and not study.trials:
        study.add_trials(history())
    return study


@contextlib.contextmanager
def study_lock(storage, db):
    """Held while a worker opens a study (replay, stale trials, seeds), so that workers opening
    it together take turns: a file lock next to a journal (this host's processes), the
    database-wide advisory lock on PostgreSQL (every host; `flashgen.db.migrate.schema_lock`),
    nothing for a one-process in-memory study."""
    lock = _JOURNAL_LOCKS.get(storage)
    if lock is not None:
        with _file_lock(lock):
            yield
        return
    from ..db.migrate import schema_lock

    with schema_lock(db.engine):  # no lock for other dialects
        yield


@contextlib.contextmanager
def _file_lock(path: str):
    """An exclusive lock between this host's processes (fcntl: released if the holder dies)."""
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def history_trials(trials, space_: Space) -> list:
    """flashgen's trials table as Optuna frozen trials (user attr `replayed`: they belong to
    earlier runs, whatever their timestamps say)."""
    import optuna
    from optuna.distributions import BaseDistribution, CategoricalDistribution
    from optuna.trial import TrialState

    dists: dict[str, BaseDistribution] = {
        p: CategoricalDistribution(space_.choices[p]) for p in PARAMS
    }
    frozen = []
    for t in trials:
        params = space_.params(t.config)
        if params is None:
            continue
        attrs = {"status": t.status, "replayed": True}
        if t.status != "pruned":
            attrs["evaluated"] = True
        if t.error:
            attrs["error"] = t.error[:500]
        ok = t.status == "ok" and t.time_ms is not None
        frozen.append(
            optuna.trial.create_trial(
                params=params,
                distributions=dists,
                value=t.time_ms if ok else None,
                state=TrialState.COMPLETE if ok else TrialState.PRUNED,
                user_attrs=attrs,
            )
        )
    return frozen


class Heartbeat:
    """Beats for the trials this process holds while it asks ahead (ask/tell has no built-in
    heartbeat; `study.optimize` would run one per trial)."""

    def __init__(self, storage) -> None:
        from optuna.storages._heartbeat import is_heartbeat_enabled

        self._storage = storage
        self._enabled = is_heartbeat_enabled(storage)
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._enabled:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def _beat(self) -> None:
        interval = self._storage.get_heartbeat_interval()
        while not self._stop.wait(interval):
            with self._lock:
                ids = list(self._ids)
            for trial_id in ids:
                with contextlib.suppress(Exception):  # a missed beat is retried next interval
                    self._storage.record_heartbeat(trial_id)

    def hold(self, trial_id: int) -> None:
        with self._lock:
            self._ids.add(trial_id)
        if self._enabled:
            self._storage.record_heartbeat(trial_id)

    def release(self, trial_id: int) -> None:
        with self._lock:
            self._ids.discard(trial_id)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


@contextlib.contextmanager
def optuna_quiet():
    """Our ask/tell loop beats its own heartbeats (`_Heartbeat`), so Optuna's advice to use
    `Study.optimize` with heartbeats, and its notes on experimental arguments, are noise."""
    import optuna

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
        yield
