"""After the search loop (`search.Search.finalize`) and whenever its best improves: the stored
record (`write_best`), the finalists re-timed back to back (`confirm`), and the best flashgen
config timed against PyTorch's SDPA backends (`compare_impls`).
"""

from __future__ import annotations

import dataclasses
import math

from ..core.config import TileConfig
from .bench import tflops
from .tasks import Result, Settings, Task


def confirm_finalists(evaluator, task: Task, times: dict[TileConfig, float], n: int) -> dict:
    """Re-time the `n` fastest of `times` (config -> first reading, ms) back to back with the
    evaluator's `retime`; returns config -> confirmed ms for those that still ran, or {} when
    there is nothing to confirm (no `retime`, n < 2, fewer than 2 finalists, or it failed)."""
    retime = getattr(evaluator, "retime", None)
    finalists = [cfg for _ms, cfg in sorted((t, c) for c, t in times.items() if math.isfinite(t))]
    finalists = finalists[:n]
    if retime is None or n < 2 or len(finalists) < 2:
        return {}
    try:
        confirmed = retime(task, finalists)
    except Exception:  # noqa: BLE001 - the first readings stand
        return {}
    return {c: t for c, t in confirmed.items() if math.isfinite(t) and t > 0}


def confirm(task: Task, evaluator, known: dict, result: Result, settings: Settings, db, env,
             shape) -> None:  # fmt: skip
    """`confirm_finalists` over the study's results (`Settings.confirm`): the fastest of the
    re-timing becomes the result and the stored record, superseding the finalists' records."""
    first = {cfg: o.time_ms for cfg, (_n, o) in known.items() if o.ok}
    confirmed = confirm_finalists(evaluator, task, first, settings.confirm)
    if not confirmed:
        return
    best = min(confirmed, key=lambda c: (confirmed[c], c))
    result.confirmed = confirmed
    result.best_config, result.best_ms = best, confirmed[best]
    result.tflops = tflops(task.spec, shape, result.best_ms)
    if result.default_config in confirmed:
        result.default_ms = confirmed[result.default_config]
    write_best(db, task, env, result, len(known), superseded=list(confirmed))


def compare_impls(task: Task, evaluator, result: Result, settings: Settings, db, env) -> None:
    """Time the stored best flashgen config (what the run time would launch) against the SDPA
    backends of `settings.impls` with the evaluator's `compare`, and store the winner and its
    ratio to the runner-up on that record (its config and time stay flashgen's own)."""
    from .sdpa import pick_impl

    compare = getattr(evaluator, "compare", None)
    if compare is None or not settings.impls or not result.measured:
        return
    rec = db.get(task.spec, task.bucket, env)
    if rec is None or not rec.measured:
        return
    times, notes = compare(task, rec.config, settings.impls)
    result.impl_times, result.impl_notes = times, notes
    impl, ratio = pick_impl(times)
    if impl is None or ratio is None:  # nothing to compare with: the record stays "not compared"
        return
    result.impl, result.impl_ratio = impl, ratio
    updated = dataclasses.replace(rec, impl=impl, impl_ratio=ratio)
    result.written = db.replace_best(updated, [rec.config]) or result.written


def write_best(
    db, task: Task, env, result: Result, n_trials: int, superseded: list[TileConfig] | None = None
) -> None:
    """Upsert the result's best as the record of (spec, bucket, env); with `superseded`, those
    configs' stored record is replaced whatever its time (they were re-timed)."""
    from ..db.records import TuningRecord

    assert result.best_config is not None
    rec = TuningRecord(
        spec=task.spec,
        bucket=task.bucket,
        env=env,
        config=result.best_config,
        time_ms=result.best_ms,
        tflops=result.tflops,
        n_trials=n_trials,
        measured=result.measured,
    )
    if superseded:
        result.written = db.replace_best(rec, superseded) or result.written
    else:
        result.written = db.upsert_best(rec) or result.written
