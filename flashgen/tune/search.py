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

import math
import os
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.config import TileConfig
from .bench import Outcome, error_text, tflops, timing_shape
from .finalize import compare_impls, confirm, write_best
from .gpus import worker_label
from .history import (
    abandon,
    ahead,
    evaluated_before,
    finished_outcomes,
    patience_left,
    running_elsewhere,
)
from .interrupts import raise_if_interrupted
from .space import Space, model_explorers, model_ranked, seed_configs
from .studies import (
    Heartbeat,
    history_trials,
    join_study,
    optuna_quiet,
    study_lock,
    study_name,
)
from .tasks import Event, Interrupted, Result, Settings, Task

if TYPE_CHECKING:
    from .evaluate import Evaluator


def worker_id() -> str:
    """Which process (and GPU, when pinned to one: `flashgen tune --gpus`) ran a trial: in the
    trial's user attrs and the trials table's host column."""
    return ":".join(p for p in (socket.gethostname(), str(os.getpid()), worker_label()) if p)


def tune_task(task: Task, **kwargs) -> Result:
    """Search the best config for `task`; write trials and the best record into `db`.

    Keyword arguments: db, storage, evaluator, device, env, settings, on_event, candidates
    (see `Search`).
    """
    with optuna_quiet():
        return Search(task, **kwargs).run()


class Search:
    """The search loop of `tune_task`, one object with named stages (like Triton's autotuner,
    `run -> prune -> bench`):

    - `open`: the study (joined, or rebuilt from the trials table) and the seeds;
    - `run`: until `stop_reason` says why, `fill` keeps candidates in flight, each asked by
      `ask_one` and then `prune`d (outside the space, or does not fit), `answer`ed (known, or
      in flight) or `start`ed on the evaluator; `bench` finishes the oldest in flight
      (`tell`, `record`, `refresh_best`);
    - `finalize`: the finalists confirmed, the implementations compared, the trial count.

    `evaluator` is an `flashgen.tune.evaluate.Evaluator`. `on_event` is called after every
    finished candidate; an exception it raises (KeyboardInterrupt included) ends the task after
    the bookkeeping. `candidates` narrows the space (default
    `flashgen.hardware.tiles.candidates(spec)`), e.g. to compare the search with an exhaustive
    grid over the same configs.
    """

    def __init__(
        self,
        task: Task,
        *,
        db,
        storage,
        evaluator: Evaluator,
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

        # Workers opening the study together take turns: exactly one replays the history, and
        # each sees the seeds the others enqueued (skip_if_exists), so no seed is queued twice
        # and run by two workers at the same moment.
        with study_lock(self.storage, self.db):
            self.study = study = join_study(
                self.storage,
                name,
                sampler,
                lambda: history_trials(self.db.trials(task.spec, task.bucket, env), self.space),
            )
            self.heart = Heartbeat(self.storage)
            if self.heart.enabled:
                # Trials of dead workers first: they are re-queued ahead of this run's seeds.
                optuna.storages.fail_stale_trials(study)
            for cfg, source in seeds:
                params = self.space.params(cfg)
                if params is not None:
                    study.enqueue_trial(params, user_attrs={"seed": source}, skip_if_exists=True)
        self.result = Result(
            task=task, study_name=name, measured=bool(self.evaluator.measured), study=study
        )
        self.result.default_config = tiles.default_config(task.spec, device)
        self.fitting = len(fitting)
        self.baseline = evaluated_before(study, settings.since)
        self.max_asks = 4 * settings.trials + 2 * len(self.space.candidates) + 16

    def run(self) -> Result:
        self.open()
        self.known = finished_outcomes(self.study)
        try:
            self.refresh_best()
            while True:
                raise_if_interrupted()  # a Ctrl-C whose own exception was lost (`interrupts`)
                self.result.stop_reason = self.stop_reason()
                if self.result.stop_reason:
                    break
                self.fill()
                if not self.inflight:
                    self.known = finished_outcomes(self.study)
                    continue
                self.bench()
        except KeyboardInterrupt:
            self.result.interrupted = True
            self.result.stop_reason = "interrupted"
            abandon(self.study, self.inflight, self.heart)
            raise Interrupted(self.result) from None
        finally:
            self.heart.close()
        abandon(self.study, self.inflight, self.heart)
        self.finalize()
        return self.result

    def stop_reason(self) -> str:
        """Why the loop ends now ("" = go on)."""
        settings, known = self.settings, self.known
        done = len(known) - self.baseline
        if not patience_left(known, settings.patience, settings.min_improvement):
            return f"no gain in {settings.patience} trials"
        if sum(1 for c in known if self.space.fits(c)) >= self.fitting:
            return "every fitting config evaluated"
        if done >= settings.trials:
            return f"{settings.trials} trials"
        if self.asks >= self.max_asks and not self.inflight:
            return "sampler kept proposing known or pruned configs"
        return ""

    def fill(self) -> None:
        """Ask ahead until `ahead` candidates are in flight (or the budget is asked)."""
        done = len(self.known) - self.baseline
        while (
            len(self.inflight) < ahead(self.known, self.settings)
            and done + len(self.inflight) < self.settings.trials
            and self.asks < self.max_asks
        ):
            self.ask_one()

    def ask_one(self) -> None:
        """Ask one trial; `prune` it, `answer` it from what is known, or `start` it."""
        import optuna

        if self.heart.enabled:
            optuna.storages.fail_stale_trials(self.study)
        trial = self.study.ask()
        self.asks += 1
        cfg = self.space.suggest(trial)
        if not self.prune(trial, cfg) and not self.answer(trial, cfg):
            self.start(trial, cfg)

    def prune(self, trial, cfg: TileConfig) -> bool:
        """A config outside the space or that does not fit the target is told PRUNED before
        the evaluator sees it (nothing is rendered or compiled for it). True when pruned."""
        from optuna.trial import TrialState

        reason = self.space.prune_reason(cfg)
        if reason is None:
            return False
        trial.set_user_attr("status", "pruned")
        self.study.tell(trial, state=TrialState.PRUNED)
        self.result.pruned += 1
        self.record(cfg, None, reason)
        return True

    def answer(self, trial, cfg: TileConfig) -> bool:
        """A config evaluated before is answered from the study; one being evaluated already
        (here, or by another worker on a shared study) is not paid for twice: FAIL, because TPE
        ignores FAIL and the config is not bad. True when the trial needs no evaluation."""
        from optuna.trial import TrialState

        if cfg in self.known:
            self.tell(trial, cfg, self.known[cfg][1], duplicate=True)
            return True
        if any(cfg == c for _t, c in self.inflight) or cfg in running_elsewhere(self.study, trial):
            trial.set_user_attr("status", "duplicate")
            self.study.tell(trial, state=TrialState.FAIL)
            return True
        return False

    def start(self, trial, cfg: TileConfig) -> None:
        """The evaluator starts on the candidate (a compile ahead, where it has a pool)."""
        self.heart.hold(trial._trial_id)
        self.evaluator.start(self.task, cfg)
        self.inflight.append((trial, cfg))

    def bench(self) -> None:
        """Finish the oldest candidate in flight (failure = that candidate, not the run), tell
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
        self.known = finished_outcomes(self.study)
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
            if self.settings.finalize:
                confirm(task, self.evaluator, self.known, result, self.settings, db, env,
                        self.shape)  # fmt: skip
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
        self.db.add_trials(self.task.spec, self.task.bucket, self.env, [trial], host=worker_id())

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
        trial.set_user_attr("worker", worker_id())
        if duplicate:
            trial.set_user_attr("duplicate", True)
        if outcome.ok:
            self.study.tell(trial, outcome.time_ms)
        else:
            trial.set_user_attr("error", outcome.error[:500])
            self.study.tell(trial, state=TrialState.PRUNED)
