"""Optuna search for the best TileConfig of one (KernelSpec, shape bucket).

One study per (spec, bucket, environment), named by `study_name`, so every process that tunes the
same thing on the same kind of GPU and software joins the same study (`load_if_exists`). The
loop uses ask/tell rather than `study.optimize` for two reasons: the next candidates can be
asked (and compiled by the evaluator's worker pool) while the current one is being timed, and
every candidate's fate is decided here, explicitly:

- a config outside `flashgen.hardware.tiles.candidates(spec)` or that does not fit the target's shared
  memory / registers (`flashgen.hardware.sram.fits`) is told as PRUNED before the evaluator ever sees it,
  so nothing is rendered or compiled for it;
- a candidate that fails (compile error, out of resources, wrong result, time-out) is told as
  PRUNED too, with its status in the trial's user attrs: Optuna's TPE learns to avoid pruned
  regions but ignores FAILED trials (Optuna's TPE sampler), and FAIL is left to mean "a worker died" (the
  heartbeat machinery retries those);
- a config the study already evaluated is answered from the study (no second compile);
- a good candidate is told its median time (or modelled time) in milliseconds.

After the search (measured runs only) the stored best config is timed back to back against
PyTorch's SDPA backends that accept the case (`Settings.impls`, checked against the same float64
reference first), and the record is rewritten with the winner and its ratio to the runner-up
(`TuningRecord.impl`, `impl_ratio`): the run-time op then calls that implementation.

Every finished candidate is written to the tuning DB's trials table as it finishes, and the best
is upserted whenever it improves, so an interrupted run (Ctrl-C, a killed worker) loses at most
the candidate in flight. Early stop: when the study's best has not improved by at least
`min_improvement` for `patience` evaluated candidates, or when every fitting config is done.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ..core.config import TileConfig
from .bench import Outcome, error_text, tflops, timing_shape
from .finalize import compare_impls, confirm, write_best
from .space import PARAMS, Space, model_explorers, model_ranked, seed_configs
from .studies import Heartbeat, optuna_quiet, replay, study_name
from .tasks import Event, Interrupted, Result, Settings, Task

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


# -- the loop ------------------------------------------------------------------------------


def _finished_outcomes(study) -> dict[TileConfig, tuple[int, Outcome]]:
    """Evaluated configs of the study (any worker): config -> (trial number, outcome)."""
    from optuna.trial import TrialState

    known: dict[TileConfig, tuple[int, Outcome]] = {}
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        attrs = t.user_attrs
        if not attrs.get("evaluated") or attrs.get("duplicate"):
            continue
        try:
            cfg = TileConfig(**t.params)
        except (TypeError, ValueError):  # missing params (a trial cut short) or out of range
            continue
        if t.state == TrialState.COMPLETE and t.value is not None:
            outcome = Outcome("ok", time_ms=float(t.value))
        else:
            outcome = Outcome(attrs.get("status", "failed"), error=attrs.get("error", ""))
        known.setdefault(cfg, (t.number, outcome))
    return known


def _evaluated_before(study, since: datetime.datetime | None) -> int:
    """Evaluated configs that count against earlier runs: all of them now, or (for the workers
    of one `--workers` run, which share `since`) those completed before the run started."""
    known = _finished_outcomes(study)
    if since is None:
        return len(known)
    numbers = {number for number, _ in known.values()}
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.number in numbers and t.datetime_complete is not None and t.datetime_complete < since
    )


def _running_elsewhere(study, own) -> set[TileConfig]:
    """Configs of trials another worker is running now (only a shared study has any)."""
    from optuna.trial import TrialState

    out = set()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number != own.number and all(p in t.params for p in PARAMS):
            out.add(TileConfig(**t.params))
    return out


def _since_improvement(known: dict, min_improvement: float) -> int:
    """Evaluated trials (in trial order) since the best last improved by `min_improvement`."""
    best = math.inf
    since = 0
    for _number, outcome in sorted(known.values(), key=lambda item: item[0]):
        if outcome.ok and outcome.time_ms < best * (1.0 - min_improvement):
            best = outcome.time_ms
            since = 0
        else:
            best = min(best, outcome.time_ms)
            since += 1
    return since


def _patience_left(known: dict, patience: int | None, min_improvement: float) -> bool:
    """False once the best has not improved for `patience` evaluated trials (in trial order)."""
    if patience is None:
        return True
    return _since_improvement(known, min_improvement) < patience


def _ahead(known: dict, settings: Settings) -> int:
    """How many candidates to keep in flight: the lookahead, but no more than the patience can
    still use (compiles asked for beyond an early stop are thrown away, and they would slow the
    next task's compiles)."""
    ahead = max(settings.lookahead, 1)
    if settings.patience is None:
        return ahead
    since = _since_improvement(known, settings.min_improvement)
    return max(1, min(ahead, settings.patience - since))


def tune_task(task: Task, **kwargs) -> Result:
    """Search the best config for `task`; write trials and the best record into `db`.

    Keyword arguments: db, storage, evaluator, device, env, settings, on_event, candidates
    (see `Search`).
    """
    with optuna_quiet():
        return Search(task, **kwargs).run()


class Search:
    """The search loop of `tune_task`, one object with named stages (like Triton's autotuner):
    `open` (the study, its replayed history, the seeds) -> `run`: until `stop_reason` says why,
    `fill` asks candidates ahead (`ask_one` prunes, answers from the study, or starts one) and
    `finish_one` times the oldest in flight (`tell`, `record`, `refresh_best`) -> `finalize`
    (confirmation of the finalists, the implementation comparison, the trial count).

    `evaluator` has `measured: bool`, `start(task, cfg)` (begin compiling ahead, may do nothing)
    and `finish(task, cfg) -> Outcome`. `on_event` is called after every finished candidate;
    an exception it raises (KeyboardInterrupt included) ends the task after the bookkeeping.
    `candidates` narrows the space (default `flashgen.hardware.tiles.candidates(spec)`), e.g. to
    compare the search with an exhaustive grid over the same configs.
    """

    def __init__(
        self,
        task: Task,
        *,
        db,
        storage,
        evaluator,
        device,
        env,
        settings: Settings,
        on_event: Callable[[Event], None] | None = None,
        candidates: Sequence[TileConfig] | None = None,
    ) -> None:
        self.task, self.db, self.storage, self.evaluator = task, db, storage, evaluator
        self.device, self.env, self.settings, self.on_event = device, env, settings, on_event
        self.space = Space(task.spec, device, candidates)
        self.inflight: deque[tuple[Any, TileConfig]] = deque()
        self.known: dict[TileConfig, tuple[int, Outcome]] = {}
        self.asks = 0
        self.shape = timing_shape(task.spec, task.bucket)

    # -- stages ----------------------------------------------------------------------------

    def open(self) -> None:
        """The study (joined, or rebuilt from the trials table), stale trials failed, and the
        seeds enqueued: the defaults table, records, the cost model's favourites."""
        import optuna

        task, settings, device, env = self.task, self.settings, self.device, self.env
        name = study_name(task.spec, task.bucket, env.key())
        # constant_liar: candidates asked ahead are still running when the next one is asked;
        # TPE then treats them as bad guesses instead of proposing their neighbourhood again.
        sampler = optuna.samplers.TPESampler(
            seed=settings.seed,
            n_startup_trials=min(10, max(settings.trials // 3, 4)),
            constant_liar=True,
        )
        self.study = study = optuna.create_study(
            storage=self.storage,
            sampler=sampler,
            study_name=name,
            direction="minimize",
            load_if_exists=True,
        )
        if isinstance(self.storage, optuna.storages.InMemoryStorage) and not study.trials:
            replay(study, self.db.trials(task.spec, task.bucket, env), self.space)
        self.result = Result(
            task=task, study_name=name, measured=bool(self.evaluator.measured), study=study
        )
        self.heart = Heartbeat(self.storage)
        if self.heart.enabled:
            # Trials of dead workers first: they are re-queued ahead of this run's seeds.
            optuna.storages.fail_stale_trials(study)
        fitting = self.space.fitting()
        modelled = model_ranked(task, device, fitting, settings.n_model_seeds())
        if modelled:
            modelled += model_explorers(task, device, fitting, modelled, settings.explore)
        records = self.db.records(spec=task.spec)
        if task.spec.sibling() is not None:
            records += self.db.records(spec=task.spec.sibling())
        seeds = seed_configs(
            task, device, env, records, settings.n_seeds(), modelled, default=settings.default_seed
        )
        from ..hardware import tiles

        self.result.default_config = tiles.default_config(task.spec, device)
        for cfg, source in seeds:
            params = self.space.params(cfg)
            if params is not None:
                study.enqueue_trial(params, user_attrs={"seed": source}, skip_if_exists=True)
        self.fitting = len(fitting)
        self.baseline = _evaluated_before(study, settings.since)
        self.max_asks = 4 * settings.trials + 2 * len(self.space.candidates) + 16

    def run(self) -> Result:
        self.open()
        self.known = _finished_outcomes(self.study)
        try:
            self.refresh_best()
            while True:
                self.result.stop_reason = self.stop_reason()
                if self.result.stop_reason:
                    break
                self.fill()
                if not self.inflight:
                    self.known = _finished_outcomes(self.study)
                    continue
                self.finish_one()
        except KeyboardInterrupt:
            self.result.interrupted = True
            self.result.stop_reason = "interrupted"
            _abandon(self.study, self.inflight, self.heart)
            raise Interrupted(self.result) from None
        finally:
            self.heart.close()
        _abandon(self.study, self.inflight, self.heart)
        self.finalize()
        return self.result

    def stop_reason(self) -> str:
        """Why the loop ends now ("" = go on)."""
        settings, known = self.settings, self.known
        done = len(known) - self.baseline
        if not _patience_left(known, settings.patience, settings.min_improvement):
            return f"no gain in {settings.patience} trials"
        if sum(1 for c in known if self.space.fits(c)) >= self.fitting:
            return "every fitting config evaluated"
        if done >= settings.trials:
            return f"{settings.trials} trials"
        if self.asks >= self.max_asks and not self.inflight:
            return "sampler kept proposing known or pruned configs"
        return ""

    def fill(self) -> None:
        """Ask ahead until `_ahead` candidates are in flight (or the budget is asked)."""
        done = len(self.known) - self.baseline
        while (
            len(self.inflight) < _ahead(self.known, self.settings)
            and done + len(self.inflight) < self.settings.trials
            and self.asks < self.max_asks
        ):
            self.ask_one()

    def ask_one(self) -> None:
        """Ask one trial; prune or answer it at once, or put it in flight."""
        import optuna
        from optuna.trial import TrialState

        study, space_ = self.study, self.space
        if self.heart.enabled:
            optuna.storages.fail_stale_trials(study)
        trial = study.ask()
        self.asks += 1
        cfg = space_.suggest(trial)
        reason = space_.prune_reason(cfg)
        if reason is not None:
            trial.set_user_attr("status", "pruned")
            study.tell(trial, state=TrialState.PRUNED)
            self.result.pruned += 1
            self.record(cfg, None, reason)
            return
        if cfg in self.known:
            self.tell(trial, cfg, self.known[cfg][1], duplicate=True)
            return
        if any(cfg == c for _t, c in self.inflight) or cfg in _running_elsewhere(study, trial):
            # Being evaluated already (here, or by another worker on a shared study): do not
            # pay for it twice. FAIL, because TPE ignores FAIL and the config is not bad.
            trial.set_user_attr("status", "duplicate")
            study.tell(trial, state=TrialState.FAIL)
            return
        self.heart.hold(trial._trial_id)
        self.evaluator.start(self.task, cfg)
        self.inflight.append((trial, cfg))

    def finish_one(self) -> None:
        """Time the oldest candidate in flight (failure = that candidate, not the run), tell
        the study, store the trial, update the best, report the event."""
        trial, cfg = self.inflight.popleft()
        try:
            outcome = self.evaluator.finish(self.task, cfg)
        except Exception as exc:  # an evaluator bug costs this candidate, not the run
            outcome = Outcome("failed", error=error_text(exc))
        self.tell(trial, cfg, outcome, duplicate=False)
        self.heart.release(trial._trial_id)
        result = self.result
        result.evaluated += 1
        if not outcome.ok:
            result.failed += 1
        self.record(cfg, outcome)
        self.known = _finished_outcomes(self.study)
        self.refresh_best()
        if self.on_event is not None:
            self.on_event(
                Event(
                    self.task,
                    cfg,
                    outcome,
                    len(self.known) - self.baseline,
                    result.best_ms,
                    result.best_config,
                )
            )

    def finalize(self) -> None:
        """After the loop: confirm the finalists, compare the implementations, count trials."""
        task, result, db, env = self.task, self.result, self.db, self.env
        try:
            confirm(task, self.evaluator, self.known, result, self.settings, db, env, self.shape)
            compare_impls(task, self.evaluator, result, self.settings, db, env)
            # The record was written when the best last improved; it counts every candidate.
            db.note_trials(task.spec, task.bucket, env, len(self.known))
        except KeyboardInterrupt:  # every trial is stored; the search's own best stands
            result.interrupted = True
            result.stop_reason = "interrupted"
            raise Interrupted(result) from None

    # -- bookkeeping -----------------------------------------------------------------------

    def record(self, cfg: TileConfig, outcome: Outcome | None, pruned_reason: str = "") -> None:
        """One finished (or pruned) candidate into the trials table, as it finishes."""
        from ..db.records import Trial

        if outcome is None:
            trial = Trial(cfg, None, "pruned", pruned_reason)
        elif outcome.ok:
            trial = Trial(cfg, outcome.time_ms, "ok")
        else:
            trial = Trial(cfg, None, outcome.status, outcome.error)
        self.db.add_trials(self.task.spec, self.task.bucket, self.env, [trial])

    def refresh_best(self) -> None:
        """The default's and the best's times from the study; the record rewritten when the
        best improves."""
        known, result = self.known, self.result
        oks = [(o.time_ms, cfg) for cfg, (_n, o) in known.items() if o.ok]
        if result.default_config in known:
            default = known[result.default_config][1]
            result.default_ms = default.time_ms if default.ok else math.inf
        if not oks:
            return
        best_ms, best_cfg = min(oks, key=lambda item: (item[0], item[1]))
        if best_ms < result.best_ms or best_cfg != result.best_config:
            result.best_ms, result.best_config = best_ms, best_cfg
            result.tflops = tflops(self.task.spec, self.shape, best_ms)
            write_best(self.db, self.task, self.env, result, len(known))

    def tell(self, trial, cfg: TileConfig, outcome: Outcome, *, duplicate: bool) -> None:
        """The study learns a candidate's outcome: its time, or PRUNED with the error."""
        from optuna.trial import TrialState

        trial.set_user_attr("evaluated", True)
        trial.set_user_attr("status", outcome.status)
        trial.set_user_attr("worker", WORKER_ID)
        if duplicate:
            trial.set_user_attr("duplicate", True)
        if outcome.ok:
            self.study.tell(trial, outcome.time_ms)
        else:
            trial.set_user_attr("error", outcome.error[:500])
            self.study.tell(trial, state=TrialState.PRUNED)


def _abandon(study, inflight: deque, heart: Heartbeat) -> None:
    """Trials asked ahead but never evaluated: FAIL them (TPE ignores FAIL)."""
    from optuna.trial import TrialState

    while inflight:
        trial, _cfg = inflight.popleft()
        heart.release(trial._trial_id)
        # The storage may be what failed; the trial then goes stale and is retried.
        with contextlib.suppress(Exception):
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
