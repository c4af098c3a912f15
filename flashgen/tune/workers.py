"""Several tuner processes on one set of studies: `flashgen tune --gpus` and `--workers N`.

The parent spawns the workers, each pinned to its GPU from birth (CUDA_VISIBLE_DEVICES is in its
environment before the interpreter starts, so nothing can create a context on another GPU), waits,
then reads what they stored back from the database. The studies are shared through the storage
`flashgen.tune.studies.open_storage` picks: PostgreSQL when the tuning database is one (any
number of hosts), otherwise an Optuna journal file this run creates in a temporary directory and
removes at the end; the records and trials go to the tuning database (SQLite waits out the other
writers' locks: `flashgen.db.repository.SQLITE_BUSY_TIMEOUT_S`).

Each worker sends the parent its environment fingerprint (the GPU model among it) when it
starts, so the summary shows each GPU model's records, and one line naming its error if it fails.

Ctrl-C: the terminal's SIGINT reaches every worker, which stops after storing what it finished
(`flashgen.tune.search`: the trial in flight is abandoned, nothing else is lost) and exits 130;
the parent forwards the signal to any worker still running after a short grace (a SIGINT sent to
the parent alone), waits for them, then prints what is stored. A worker ignores a second SIGINT,
so a repeated Ctrl-C cannot cut its bookkeeping short. SIGTERM to the parent (`timeout`, a job
scheduler) stops the run the same way, and on Linux a worker whose parent is killed outright
gets SIGINT too (PR_SET_PDEATHSIG), so no orphan keeps a GPU busy.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

from ..core.environ import set_env
from . import interrupts

FORWARD_AFTER_S = 2.0  # grace before the parent forwards Ctrl-C to a worker still running
STOP_WAIT_S = 60.0  # how long a stopping worker may take to store its last trial
START_WAIT_S = 120.0  # how long a ready worker waits for the others before starting alone


def pins(gpus: list[int] | None, workers: int, visible: int) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES of each worker: one per chosen GPU for --gpus; for --workers N,
    round-robin over the visible GPUs when there are several, else no pin (None)."""
    from .gpus import pin_value

    if gpus is not None:
        return [pin_value(i) for i in gpus]
    if visible > 1:
        return [pin_value(i % visible) for i in range(workers)]
    return [None] * workers


def _first_interrupt_only(_signum, _frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupts.remember()  # the search stops at its next candidate even if this exception is lost
    raise KeyboardInterrupt


def _stop_with_parent(parent: int | None) -> None:
    """Linux: SIGINT this worker when its parent dies (killed, so unable to stop it), so that
    no orphan goes on tuning on a GPU someone else is now timing on. Best effort elsewhere."""
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, int(signal.SIGINT))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request was made
        os.kill(os.getpid(), signal.SIGINT)


def worker_main(
    argv: dict, opts: dict, task_data: list, index: int, report=None, start=None
) -> None:
    """Entry point of one spawned worker: the same studies, its own GPU (already pinned).

    Sends the parent its fingerprint (a dict) first; a failure is sent as one line (the
    exception's type and message) and ends the worker with status 1; Ctrl-C ends it with 130.
    Unexpected errors also print their traceback here, where it happened. `start` (a
    barrier shared by the run's workers) holds each one after its set-up (imports, CUDA, the
    compile pool) until all are ready, so they share the first study from its first trial; a
    worker that never arrives delays the others by START_WAIT_S at most.
    """
    signal.signal(signal.SIGINT, _first_interrupt_only)
    _stop_with_parent(argv.get("parent_pid"))
    args = argparse.Namespace(**argv)
    from ..db import DatabaseError, connect

    try:
        from ..core.spec import KernelSpec
        from ..hardware.sram import current_device
        from ..runtime.lookup import current_fingerprint
        from .runner import prepare_backend, tune_all
        from .tasks import Task

        gpu = prepare_backend()
        if report is not None:
            report.send(current_fingerprint(current_device()).as_dict())
        tasks = [Task(KernelSpec.from_uri(uri), tuple(bucket)) for uri, bucket in task_data]
        db = connect(args.db)
        tune_all(args, opts, tasks, db, gpu, worker=index, ready=lambda: _arrive(start))
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


def _arrive(start) -> None:
    if start is None:
        return
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait(timeout=START_WAIT_S)


def worker_failures(exitcodes: list, reports: dict[int, str]) -> list[str]:
    """One line per failed worker: its index, then its own report, the signal that killed it,
    or its exit status. Workers stopped by Ctrl-C (130) are not failures."""
    lines = []
    for index, code in enumerate(exitcodes):
        if code in (0, 130):
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


class Outcome:
    """What `run_workers` returns: each GPU model's results (fingerprint, per-task results as
    stored), one line per failed worker, and whether Ctrl-C stopped the run."""

    def __init__(self, per_env: list, failures: list[str], interrupted: bool) -> None:
        self.per_env, self.failures, self.interrupted = per_env, failures, interrupted


def run_workers(args, opts: dict, tasks: list, db, worker_pins: list[str | None]) -> Outcome:
    """Start one worker per entry of `worker_pins` on the same studies, wait, read back."""
    import datetime
    import multiprocessing
    import shutil
    import tempfile

    # the spec by its uri: every field (lengths, mask kind, dropout too) crosses the process
    task_data = [(t.spec.uri(), t.bucket) for t in tasks]
    argv = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    argv["db"] = db.engine.url.render_as_string(hide_password=False)
    argv["workers"] = len(worker_pins)
    journal_dir = None
    if db.dialect != "postgresql":
        journal_dir = tempfile.mkdtemp(prefix="flashgen-tune-")
        argv["journal"] = os.path.join(journal_dir, "studies.journal")
    # One start time for all workers of this run, so `--trials` is the run's total however
    # late a worker process comes up (a worker counting from its own start would add more).
    argv["run_started"] = datetime.datetime.now()
    argv["parent_pid"] = os.getpid()
    ctx = multiprocessing.get_context("spawn")
    # One pipe per worker (not a shared queue: a worker killed while holding a queue's lock
    # would block the others' reports).
    pipes = [ctx.Pipe(duplex=False) for _ in worker_pins]
    start = ctx.Barrier(len(worker_pins))
    procs = []
    try:
        for i, pin in enumerate(worker_pins):
            proc = ctx.Process(
                target=worker_main, args=(argv, opts, task_data, i, pipes[i][1], start)
            )
            with set_env("CUDA_VISIBLE_DEVICES", pin):  # the child inherits it when spawned
                proc.start()
            procs.append(proc)
        interrupted = _stopped(_wait(procs), [proc.exitcode for proc in procs])
    finally:
        for proc in procs:  # only when the parent itself failed: leave no orphan behind
            if proc.is_alive():
                proc.kill()
                proc.join()
        if journal_dir is not None:
            shutil.rmtree(journal_dir, ignore_errors=True)
    reports: dict[int, str] = {}
    envs: list = []
    for i, (receive, _send) in enumerate(pipes):
        while receive.poll():
            message = receive.recv()
            if isinstance(message, dict):
                envs.append(message)
            else:
                reports[i] = message
    failures = worker_failures([p.exitcode for p in procs], reports)
    return Outcome(_per_env(tasks, db, envs), failures, interrupted)


def _stopped(waited: bool, exitcodes: list) -> bool:
    """Whether the run was stopped by Ctrl-C: `_wait` said so, or, where the parent's own
    KeyboardInterrupt got lost (`flashgen.tune.interrupts`), its handler remembered one or a
    worker exited with 130."""
    return waited or interrupts.interrupted() or 130 in exitcodes


def _sigterm_as_interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def _wait(procs: list) -> bool:
    """Join every worker; True when Ctrl-C (or SIGTERM, e.g. from `timeout`) came first: then
    every worker is stopped (see the module docstring)."""
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        for proc in procs:
            proc.join()
        return False
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("flashgen tune: stopping the workers (finished trials are kept)", file=sys.stderr)
    try:
        for proc in procs:
            proc.join(timeout=FORWARD_AFTER_S)
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGINT)
        for proc in procs:
            proc.join(timeout=STOP_WAIT_S)
    except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
        pass
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
    return True


def _per_env(tasks: list, db, envs: list[dict]) -> list:
    """[(fingerprint, results)] for each distinct fingerprint the workers reported (the
    parent's own when none did, e.g. every worker died before starting)."""
    from ..db.records import EnvFingerprint

    distinct: list = []
    for data in envs:
        env = EnvFingerprint(**data)
        if env not in distinct:
            distinct.append(env)
    if not distinct:
        from ..hardware.sram import current_device
        from ..runtime.lookup import current_fingerprint

        distinct.append(current_fingerprint(current_device()))
    return [(env, results_from_db(tasks, db, env)) for env in distinct]


def results_from_db(tasks, db, env) -> list:
    """Per-task results as the database holds them for `env` after the workers finished."""
    from .studies import study_name
    from .tasks import Result

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
