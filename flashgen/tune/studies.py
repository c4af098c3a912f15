"""Where the tuner's Optuna studies live, and the heartbeats that let a cluster share them.

One study per (spec, bucket, environment), named by `study_name`, so every process that tunes
the same thing on the same kind of GPU and software joins the same study. `open_storage` picks
the storage from the tuning database's URL (PostgreSQL: shared, with heartbeats; SQLite: in
memory, rebuilt from flashgen's own trials table by `replay`).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import TYPE_CHECKING

from ..core.spec import KernelSpec
from .space import PARAMS

if TYPE_CHECKING:
    from .space import Space

HEARTBEAT_INTERVAL_S = 30
HEARTBEAT_GRACE_S = 120


def study_name(spec: KernelSpec, bucket: tuple[int, int], env_key: str) -> str:
    """One study per (spec, bucket, environment): the same on every host that should join it."""
    return f"flashgen:{spec.uri()}:{bucket[0]}x{bucket[1]}:{env_key}"


def open_storage(
    db,
    *,
    workers: int = 1,
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
    - SQLite: Optuna's `InMemoryStorage`, one process only, so `workers > 1` is refused here,
      before any work. Why not Optuna's `RDBStorage` on the same SQLite file: SQLite serialises
      writers with a file lock, and Optuna's many small transactions from several processes end
      in "database is locked" (seen with eight writers on this project's machines); even for one process it commits (and fsyncs) on every
      `suggest`, which measured 6 ms a commit and ~0.3 s a trial here, as long as timing a
      candidate. Nothing is lost by keeping the study in memory: every finished trial is already
      in flashgen's trials table, and `tune_task` replays that table into a new in-memory study,
      so a re-run (or a run after Ctrl-C) resumes where the last one stopped.
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
    check_workers(db, workers)
    return optuna.storages.InMemoryStorage()


def check_workers(db, workers: int) -> None:
    """Refuse several workers unless the database can share a study (PostgreSQL)."""
    if workers > 1 and db.dialect != "postgresql":
        raise ValueError(
            f"--workers {workers} needs a PostgreSQL database (--db postgresql://...): several "
            f"processes cannot share one Optuna study in SQLite ({db.url_safe}); "
            "run one worker per SQLite file, or point all workers at PostgreSQL"
        )


def replay(study, trials, space_: Space) -> int:
    """Rebuild an in-memory study from flashgen's trials table (see `open_storage`)."""
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
    study.add_trials(frozen)
    return len(frozen)


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
