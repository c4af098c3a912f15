"""One process tuning its share of the tasks: the backend (GPU or Triton's interpreter), the
evaluator, the search settings, a progress bar per task, and Ctrl-C that keeps what is done."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys


def prepare_backend() -> bool:
    """True when a CUDA GPU is present; otherwise switch Triton to its interpreter (before
    anything imports Triton) and say so."""
    import torch

    if torch.cuda.is_available():
        return True
    os.environ["TRITON_INTERPRET"] = "1"
    return False


class Stopped(KeyboardInterrupt):
    """Ctrl-C in `tune_all`, carrying the results so far (the interrupted task's included)."""

    def __init__(self, results: list) -> None:
        super().__init__("tuning interrupted")
        self.results = results


def _settings(opts: dict, args: argparse.Namespace, lookahead: int):
    from .tasks import Settings

    patience = opts["patience"]
    return Settings(
        trials=int(opts["trials"]),
        patience=None if not patience else int(patience),
        seed=int(args.seed),
        lookahead=max(1, lookahead),
        since=getattr(args, "run_started", None),
        impls=() if getattr(args, "no_sdpa", False) else Settings.impls,
    )


def _compile_workers(args: argparse.Namespace, gpu: bool) -> int:
    if not gpu:
        return 0
    if args.compile_workers is not None:
        return max(0, args.compile_workers)
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def tune_all(args, opts, tasks, db, gpu: bool, worker: int, ready=None) -> list:
    """Tune every task in this process; returns the per-task results."""
    import optuna

    from ..hardware.sram import current_device
    from ..runtime.lookup import current_fingerprint
    from .evaluate import MeasuredEvaluator, ModelledEvaluator
    from .interrupts import interrupted
    from .search import tune_task
    from .studies import open_storage
    from .tasks import Interrupted

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = current_device()
    env = current_fingerprint(device)
    storage = open_storage(db, workers=args.workers, journal=getattr(args, "journal", None))
    compile_workers = _compile_workers(args, gpu)
    evaluator = (
        MeasuredEvaluator(compile_workers=compile_workers) if gpu else ModelledEvaluator(device)
    )
    settings = _settings(opts, args, lookahead=compile_workers)
    results = []
    try:
        if gpu and not args.quiet:
            print(f"flashgen tune: starting {compile_workers} compile workers", file=sys.stderr)
        if isinstance(evaluator, MeasuredEvaluator):  # start-up once, not in a first candidate
            evaluator.warm_up()
        if ready is not None:  # the other workers of the run are set up too: start together
            ready()
        for index, task in enumerate(tasks):
            bar = _progress(task, settings.trials, quiet=args.quiet, position=worker)
            # The workers of one run share each task's study and record: one of them (in turn)
            # confirms the finalists and compares SDPA while the others go on to the next task.
            # Each its own sampler seed: TPE seeded alike proposes alike, at the same moment.
            finalize = index % max(1, args.workers) == worker
            try:
                results.append(
                    tune_task(
                        task,
                        db=db,
                        storage=storage,
                        evaluator=evaluator,
                        device=device,
                        env=env,
                        settings=dataclasses.replace(
                            settings, finalize=finalize, seed=settings.seed + worker
                        ),
                        on_event=bar.update if bar else None,
                    )  # fmt: skip
                )
            except Interrupted as stop:
                results.append(stop.result)
                raise Stopped(results) from None
            finally:
                if bar:
                    bar.close()
        if interrupted():  # a Ctrl-C lost in the last task's bookkeeping (`interrupts`)
            raise Stopped(results)
    finally:
        evaluator.close()
    return results


class _Bar:
    """tqdm bar per task with the best config and time so far."""

    def __init__(self, task, total: int, position: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=task.label(), position=position, leave=True,
                         file=sys.stderr, dynamic_ncols=True)  # fmt: skip

    def update(self, event) -> None:
        self._bar.n = min(event.evaluated, self._bar.total)
        if event.best_config is not None:
            self._bar.set_postfix_str(f"best {event.best_ms:.4g} ms {event.best_config.short()}")
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()


def _progress(task, total: int, *, quiet: bool, position: int):
    return None if quiet else _Bar(task, total, position)
