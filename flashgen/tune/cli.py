"""Search the fastest tile config per kernel spec and shape bucket; write the tuning database.

For each (head dim, dtype, causal, direction) and each sequence-length bucket, an Optuna study
samples block_m, block_n, num_warps and num_stages. Configs that do not fit the GPU's shared
memory are pruned before anything compiles; every other candidate is checked against a float64
reference (a wrong kernel is never recorded) and timed (median, L2 flushed) while the next
candidates compile in worker processes. The best config goes into the tuning database, where
the runtime dispatch and `torch.compile(backend="flashgen")` find it.

On a GPU each task ends with the tuned config timed back to back against PyTorch's SDPA backends
that accept the case (cuDNN, flash, memory-efficient; each checked against the same float64
reference first). The record keeps flashgen's best config and says which implementation won and
by how much over the runner-up; the op then runs the winner (--no-sdpa skips the comparison).

Without a GPU the same pipeline runs the kernels in Triton's CPU interpreter at tiny sizes for
the correctness check, and ranks candidates with an analytical cost model of the planning target
(FLASHGEN_GPU, default the H200). Those records are marked modelled; a measured record always
replaces them, and they seed the GPU's search for the same shapes. On a CPU-only machine the
defaults keep the trial count small (12 per task, 16 tasks) so plain `flashgen tune` finishes in
about a minute on 2 cores.

Several GPUs: --gpus all (or --gpus 0,1,...) starts one worker process per GPU of this host,
each pinned to its GPU (CUDA_VISIBLE_DEVICES) and timing there only, all on the same studies
and the same tuning database. On SQLite the studies live in an Optuna journal file made for the
run (no server); with a PostgreSQL URL (--db postgresql://... or FLASHGEN_DB_URL) the same
command on several hosts joins one set of studies. --workers N starts N worker processes
without pinning them to one GPU each (round-robin when there are several). Records carry the
GPU model, so a cluster of mixed GPUs keeps one record per model; the summary shows each
model's. If a worker fails, the run names it and its error and exits 1.

Ctrl-C keeps every finished trial and the best so far (exit status 130); with several workers
it stops all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from . import interrupts
from .options import add_arguments, build_tasks, check_options, resolve_options
from .runner import Stopped, prepare_backend, tune_all
from .summary import format_summary

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    check_options(args)  # before torch loads and before any banner
    interrupts.install()  # (a Ctrl-C whose exception gets swallowed still stops the run)
    gpu = prepare_backend()
    opts = resolve_options(args, gpu)
    tasks = [] if args.pending else build_tasks(opts, args.seq_k)
    from ..db import connect
    from ..runtime.lookup import current_fingerprint

    gpus = None
    if args.gpus is not None:
        from .gpus import choose_gpus

        gpus = choose_gpus(args.gpus)  # before the database: a bad index costs nothing
    db = connect(args.db)  # a fault is one line (DatabaseError), printed by flashgen.cli
    if args.pending:
        from .tasks import Task

        tasks = [Task(spec, bucket) for spec, bucket in db.pending()]
        if not tasks:
            print(f"flashgen tune: no pending shapes in {db.url_safe}")
            return 0
    from ..hardware.sram import current_device

    if not args.quiet:
        if not gpu:
            print(
                "flashgen tune: no CUDA GPU: CPU/interpreter mode. Kernels are checked in "
                "Triton's interpreter at tiny sizes and ranked by a cost model of the planning "
                "target; records are stored as modelled (a GPU measurement replaces them).",
                file=sys.stderr,
            )
        kind = "measured on" if gpu else "modelled for"
        print(
            f"flashgen tune: {len(tasks)} spec x bucket tasks, up to {opts['trials']} trials "
            f"each, {kind} {current_device().name}, into {db.url_safe}",
            file=sys.stderr,
        )
    if gpus is not None or args.workers > 1:
        with _database_faults(db):
            return _run_several(args, opts, tasks, db, gpus)
    env = current_fingerprint(current_device())
    with _database_faults(db):
        try:
            results = tune_all(args, opts, tasks, db, gpu, worker=0)
        except Stopped as stop:  # the table of what is stored, then exit status 130
            print(format_summary(stop.results, db=db, env=env))
            raise KeyboardInterrupt from None
        if args.pending:
            for task in tasks:
                db.clear_pending(task.spec, task.bucket)
        print(format_summary(results, db=db, env=env))
    return 0


def _run_several(args, opts, tasks, db, gpus: list[int] | None) -> int:
    """--gpus / --workers N: the workers' run (`flashgen.tune.workers`), then each GPU model's
    table of what is stored; exit 1 naming each failed worker, 130 after Ctrl-C."""
    from .gpus import visible_gpu_count
    from .workers import pins, run_workers

    visible = visible_gpu_count() if gpus is None else len(gpus)
    worker_pins = pins(gpus, args.workers, visible)
    if gpus is None and 0 < visible < args.workers:
        print(
            f"flashgen tune: warning: {args.workers} workers share {visible} GPU(s); their "
            "timings disturb each other",
            file=sys.stderr,
        )
    if gpus is not None and not args.quiet:
        shown = ", ".join(pin or "?" for pin in worker_pins)
        print(f"flashgen tune: one worker per GPU: {shown}", file=sys.stderr)
    outcome = run_workers(args, opts, tasks, db, worker_pins)
    for env, results in outcome.per_env:
        if len(outcome.per_env) > 1:
            print(f"{env.gpu_name}:")
        print(format_summary(results, db=db, env=env))
    if outcome.interrupted:
        raise KeyboardInterrupt
    if args.pending and not outcome.failures:  # a failed worker may have left some untuned
        for task in tasks:
            db.clear_pending(task.spec, task.bucket)
    if outcome.failures:
        for line in outcome.failures:
            print(f"flashgen tune: {line}", file=sys.stderr)
        print(
            f"flashgen tune: error: {len(outcome.failures)} of {len(worker_pins)} workers "
            "failed; the table shows what the others stored",
            file=sys.stderr,
        )
        return 1
    return 0


@contextlib.contextmanager
def _database_faults(db):
    """Errors from Optuna's own engine on the tuning database (its study tables), which do not
    pass through `TuningDB`, become the same one-line `DatabaseError` as ours."""
    from sqlalchemy.exc import SQLAlchemyError

    from ..db import DatabaseError
    from ..db.faults import explain

    url = db.engine.url.render_as_string(hide_password=False)
    try:
        yield
    except SQLAlchemyError as exc:
        raise DatabaseError(explain(exc, url)) from None
    except Exception as exc:
        cause = exc.__cause__ or exc.__context__
        if type(exc).__name__ == "StorageInternalError" and isinstance(cause, SQLAlchemyError):
            raise DatabaseError(explain(cause, url)) from None
        raise
