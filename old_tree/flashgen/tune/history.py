"""What a study's trials say: the configs evaluated so far (by any worker), those running
elsewhere, how long the best has not improved, how many candidates to keep in flight, and the
trials to give up when the search ends. Read by `flashgen.tune.search.Search` between stages."""

from __future__ import annotations

import contextlib
import datetime
import math
from collections import deque

from ..core.config import TileConfig
from .bench import Outcome
from .space import PARAMS
from .studies import Heartbeat
from .tasks import Settings


def finished_outcomes(study) -> dict[TileConfig, tuple[int, Outcome]]:
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


def evaluated_before(study, since: datetime.datetime | None) -> int:
    """Evaluated configs that count against earlier runs: all of them now, or (for the workers
    of one `--workers` run, which share `since`) those completed before the run started or
    replayed from the trials table (stamped when replayed, but earlier runs' work)."""
    known = finished_outcomes(study)
    if since is None:
        return len(known)
    numbers = {number for number, _ in known.values()}
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.number in numbers
        and (
            t.user_attrs.get("replayed")
            or (t.datetime_complete is not None and t.datetime_complete < since)
        )
    )


def running_elsewhere(study, own) -> set[TileConfig]:
    """Configs of trials another worker is running now (only a shared study has any)."""
    from optuna.trial import TrialState

    out = set()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number != own.number and all(p in t.params for p in PARAMS):
            out.add(TileConfig(**t.params))
    return out


def since_improvement(known: dict, min_improvement: float) -> int:
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


def patience_left(known: dict, patience: int | None, min_improvement: float) -> bool:
    """False once the best has not improved for `patience` evaluated trials (in trial order)."""
    if patience is None:
        return True
    return since_improvement(known, min_improvement) < patience


def ahead(known: dict, settings: Settings) -> int:
    """How many candidates to keep in flight: the lookahead, but no more than the patience can
    still use (compiles asked for beyond an early stop are thrown away, and they would slow the
    next task's compiles)."""
    ahead = max(settings.lookahead, 1)
    if settings.patience is None:
        return ahead
    since = since_improvement(known, settings.min_improvement)
    return max(1, min(ahead, settings.patience - since))


def abandon(study, inflight: deque, heart: Heartbeat) -> None:
    """Trials asked ahead but never evaluated: FAIL them (TPE ignores FAIL)."""
    from optuna.trial import TrialState

    while inflight:
        trial, _cfg = inflight.popleft()
        heart.release(trial._trial_id)
        # The storage may be what failed; the trial then goes stale and is retried.
        with contextlib.suppress(Exception):
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
