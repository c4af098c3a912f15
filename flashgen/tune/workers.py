"""`flashgen tune --workers N`: several processes on the same PostgreSQL studies, one GPU each
when there are several; the parent names every worker that failed."""

from __future__ import annotations

import argparse
import os
import sys

from .runner import prepare_backend, tune_all


def worker_main(
    argv: dict, opts: dict, task_data: list, index: int, gpus: int, report=None
) -> None:
    """Entry point of one spawned worker: its own GPU when there are several, same studies.

    A failure is sent to the parent through `report` (one line: the exception's type and
    message) and ends the worker with status 1; the parent names it (`worker_failures`).
    Unexpected errors also print their traceback here, where it happened.
    """
    if gpus > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
    args = argparse.Namespace(**argv)
    from ..db import DatabaseError, connect

    try:
        gpu = prepare_backend()
        from ..core.spec import KernelSpec
        from .tasks import Task

        tasks = [Task(KernelSpec(*spec), tuple(bucket)) for spec, bucket in task_data]
        db = connect(args.db)
        tune_all(args, opts, tasks, db, gpu, worker=index)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        if not isinstance(exc, (ValueError, DatabaseError)):
            import traceback

            traceback.print_exc()
        if report is not None:
            lines = str(exc).strip().splitlines()
            report.send(f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500])
        sys.exit(1)


def worker_failures(exitcodes: list, reports: dict[int, str]) -> list[str]:
    """One line per failed worker: its index, then its own report, the signal that killed it,
    or its exit status."""
    import signal

    lines = []
    for index, code in enumerate(exitcodes):
        if code == 0:
            continue
        if index in reports:
            why = reports[index]
        elif code is not None and code < 0:
            try:
                why = f"killed by signal {signal.Signals(-code).name}"
            except ValueError:
                why = f"killed by signal {-code}"
        else:
            why = f"exit status {code}"
        lines.append(f"worker {index} of {len(exitcodes)} failed: {why}")
    return lines


def run_workers(args, opts, tasks, db) -> tuple[list, list[str]]:
    """Start `--workers` processes on the same studies, wait, then read the results back.

    Returns the results and one line per failed worker (empty when all succeeded)."""
    import datetime
    import multiprocessing

    gpus = 0
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        pass
    if 0 < gpus < args.workers:
        print(
            f"flashgen tune: warning: {args.workers} workers share {gpus} GPU(s); their timings "
            "disturb each other",
            file=sys.stderr,
        )
    task_data = [((t.spec.head_dim, t.spec.causal, t.spec.dtype, t.spec.direction, t.spec.window,
                  t.spec.softcap), t.bucket) for t in tasks]  # fmt: skip
    argv = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    argv["db"] = db.engine.url.render_as_string(hide_password=False)
    # One start time for all workers of this run, so `--trials` is the run's total however
    # late a worker process comes up (a worker counting from its own start would add more).
    argv["run_started"] = datetime.datetime.now()
    ctx = multiprocessing.get_context("spawn")
    # One pipe per worker (not a shared queue: a worker killed while holding a queue's lock
    # would block the others' reports).
    pipes = [ctx.Pipe(duplex=False) for _ in range(args.workers)]
    procs = [
        ctx.Process(
            target=worker_main, args=(argv, opts, task_data, i, gpus, pipes[i][1]), daemon=False
        )
        for i in range(args.workers)
    ]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        for p in procs:
            p.join(timeout=30)
        raise
    reports = {}
    for i, (receive, _send) in enumerate(pipes):
        if receive.poll():
            reports[i] = receive.recv()
    failures = worker_failures([p.exitcode for p in procs], reports)
    return _results_from_db(tasks, db), failures


def _results_from_db(tasks, db) -> list:
    """Per-task results as the database holds them after several workers finished."""
    from ..hardware.sram import current_device
    from ..runtime.lookup import current_fingerprint
    from .studies import study_name
    from .tasks import Result

    device = current_device()
    env = current_fingerprint(device)
    results = []
    for task in tasks:
        rec = db.get(task.spec, task.bucket, env)
        result = Result(task=task, study_name=study_name(task.spec, task.bucket, env.key()),
                        measured=bool(rec.measured) if rec else False)  # fmt: skip
        if rec is not None:
            result.best_config, result.best_ms, result.tflops = rec.config, rec.time_ms, rec.tflops
            result.evaluated = rec.n_trials
            result.impl, result.impl_ratio = rec.impl, rec.impl_ratio
        results.append(result)
    return results
