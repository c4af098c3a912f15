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

Cluster: point every process at one PostgreSQL URL (--db postgresql://... or FLASHGEN_DB_URL)
and they cooperate on the same studies; --workers N starts N such processes here (one per GPU
when there are several) and exits 1, naming the worker and its error, if any of them fails.
Several workers on SQLite are refused.

Ctrl-C keeps every finished trial and the best so far (exit status 130).
"""

from __future__ import annotations

import argparse
import os
import sys

GPU_DEFAULTS = {
    "head_dim": "64,128",
    "dtype": "bfloat16",
    "causal": "both",
    "seq_len": "1024,4096",
    "direction": "fwd,bwd",
    "trials": 40,
    "patience": 15,
}
CPU_DEFAULTS = {
    "head_dim": "64,128",
    "dtype": "bfloat16",
    "causal": "both",
    "seq_len": "1024,4096",
    "direction": "fwd,bwd",
    "trials": 12,
    "patience": 6,
}


def _csv_ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} takes positive integers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    what = parser.add_argument_group("what to tune (defaults: GPU / CPU-only machine)")
    what.add_argument(
        "--head-dim", metavar="D[,D]",
        help=f"head dims (default {GPU_DEFAULTS['head_dim']} / {CPU_DEFAULTS['head_dim']})",
    )  # fmt: skip
    what.add_argument(
        "--dtype", metavar="T[,T]",
        help="float16, bfloat16, float32 "
        f"(default {GPU_DEFAULTS['dtype']} / {CPU_DEFAULTS['dtype']})",
    )  # fmt: skip
    what.add_argument(
        "--causal", choices=("both", "true", "false"), default=None, help="masking (default both)"
    )
    what.add_argument(
        "--seq-len", metavar="N[,N]",
        help="query lengths; each is tuned at its power-of-two bucket (default "
        f"{GPU_DEFAULTS['seq_len']})",
    )  # fmt: skip
    what.add_argument(
        "--seq-k", metavar="N[,N]",
        help="key lengths: one for all, or one per --seq-len (default: equal to the query length)",
    )  # fmt: skip
    what.add_argument("--direction", metavar="fwd,bwd", help="fwd, bwd or both (default fwd,bwd)")
    what.add_argument(
        "--pending", action="store_true",
        help="tune exactly the shapes compiled models met without a tuned record "
        "(`flashgen db pending`), then clear them",
    )  # fmt: skip
    how = parser.add_argument_group("how hard")
    how.add_argument(
        "--trials", type=int, default=None,
        help=f"evaluated candidates per spec and bucket (default {GPU_DEFAULTS['trials']} / "
        f"{CPU_DEFAULTS['trials']}); pruned configs are free",
    )  # fmt: skip
    how.add_argument(
        "--patience", type=int, default=None,
        help="stop a study when its best has not improved for this many candidates "
        f"(default {GPU_DEFAULTS['patience']} / {CPU_DEFAULTS['patience']}; 0: never)",
    )  # fmt: skip
    how.add_argument("--seed", type=int, default=0, help="sampler seed (default 0)")
    how.add_argument(
        "--no-sdpa", action="store_true",
        help="do not time PyTorch's SDPA backends against the tuned kernel (GPU only; records "
        "then name no winner and the run time uses its defaults)",
    )  # fmt: skip
    where = parser.add_argument_group("where")
    where.add_argument(
        "--db", metavar="URL",
        help="tuning database (default FLASHGEN_DB_URL, else the SQLite file in the cache dir)",
    )  # fmt: skip
    where.add_argument(
        "--workers", type=int, default=1,
        help="tuner processes cooperating on the same studies (PostgreSQL only; default 1)",
    )  # fmt: skip
    where.add_argument(
        "--compile-workers", type=int, default=None,
        help="processes compiling upcoming candidates while the GPU times the current one "
        "(default: half the CPU cores, at most 8; none in interpreter mode)",
    )  # fmt: skip
    where.add_argument("--quiet", action="store_true", help="no progress bar")


def _prepare_backend() -> bool:
    """True when a CUDA GPU is present; otherwise switch Triton to its interpreter (before
    anything imports Triton) and say so."""
    import torch

    if torch.cuda.is_available():
        return True
    os.environ["TRITON_INTERPRET"] = "1"
    return False


def _resolve(args: argparse.Namespace, gpu: bool) -> dict:
    defaults = GPU_DEFAULTS if gpu else CPU_DEFAULTS
    out = {}
    for key in ("head_dim", "dtype", "seq_len", "direction", "trials", "patience"):
        value = getattr(args, key)
        out[key] = defaults[key] if value is None else value
    out["causal"] = args.causal or defaults["causal"]
    return out


def build_tasks(opts: dict, seq_k: str | None):
    """The (spec, bucket) tasks the options name, in a stable order."""
    from .search import Task
    from .spec import KernelSpec, shape_bucket

    head_dims = _csv_ints(str(opts["head_dim"]), "--head-dim")
    dtypes = [d.strip() for d in str(opts["dtype"]).split(",") if d.strip()]
    directions = [d.strip() for d in str(opts["direction"]).split(",") if d.strip()]
    causals = {"both": [False, True], "true": [True], "false": [False]}[opts["causal"]]
    seq_q = _csv_ints(str(opts["seq_len"]), "--seq-len")
    seq_k_list = _csv_ints(seq_k, "--seq-k") if seq_k else seq_q
    if len(seq_k_list) == 1:
        seq_k_list = seq_k_list * len(seq_q)
    if len(seq_k_list) != len(seq_q):
        raise ValueError("--seq-k takes one length or one per --seq-len")
    buckets = list(
        dict.fromkeys(shape_bucket(q, k) for q, k in zip(seq_q, seq_k_list, strict=True))
    )
    tasks: list[Task] = []
    for direction in directions:
        for dtype in dtypes:
            for head_dim in head_dims:
                for causal in causals:
                    spec = KernelSpec(head_dim, causal, dtype, direction)
                    tasks.extend(Task(spec, bucket) for bucket in buckets)
    return tasks


def run(args: argparse.Namespace) -> int:
    gpu = _prepare_backend()
    if not gpu:
        print(
            "flashgen tune: no CUDA GPU: CPU/interpreter mode. Kernels are checked in Triton's "
            "interpreter at tiny sizes and ranked by a cost model of the planning target; "
            "records are stored as modelled (a GPU measurement replaces them).",
            file=sys.stderr,
        )
    if args.workers < 1:
        raise ValueError("--workers must be >= 1")
    opts = _resolve(args, gpu)
    if opts["trials"] < 1:
        raise ValueError("--trials must be >= 1")
    tasks = [] if args.pending else build_tasks(opts, args.seq_k)
    from .db import DatabaseError, connect

    try:
        db = connect(args.db)
    except DatabaseError as exc:  # a clear one-line error, not a traceback (cli.py prints it)
        raise ValueError(str(exc)) from None
    from .studies import check_workers

    check_workers(db, args.workers)  # several workers on SQLite: refused before any work
    if args.pending:
        from .search import Task

        tasks = [Task(spec, bucket) for spec, bucket in db.pending()]
        if not tasks:
            print(f"flashgen tune: no pending shapes in {db.url_safe}")
            return 0
    from .sram import current_device

    kind = "measured on" if gpu else "modelled for"
    print(
        f"flashgen tune: {len(tasks)} spec x bucket tasks, up to {opts['trials']} trials each, "
        f"{kind} {current_device().name}, into {db.url_safe}",
        file=sys.stderr,
    )
    failures: list[str] = []
    if args.workers > 1:
        results, failures = _run_workers(args, opts, tasks, db)
    else:
        results = _tune_all(args, opts, tasks, db, gpu, worker=0)
    if args.pending and not failures:  # a failed worker may have left some of them untuned
        for task in tasks:
            db.clear_pending(task.spec, task.bucket)
    print(format_summary(results, db=db))
    if failures:
        for line in failures:
            print(f"flashgen tune: {line}", file=sys.stderr)
        print(
            f"flashgen tune: error: {len(failures)} of {args.workers} workers failed; the table "
            "shows what the others stored",
            file=sys.stderr,
        )
        return 1
    return 0


def _settings(opts: dict, args: argparse.Namespace, lookahead: int):
    from .search import Settings

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


def _tune_all(args, opts, tasks, db, gpu: bool, worker: int) -> list:
    """Tune every task in this process; returns the per-task results."""
    import optuna

    from .db.records import current_fingerprint
    from .evaluate import MeasuredEvaluator, ModelledEvaluator
    from .search import Interrupted, open_storage, tune_task
    from .sram import current_device

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    device = current_device()
    env = current_fingerprint(device)
    storage = open_storage(db, workers=args.workers)
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
        for task in tasks:
            bar = _progress(task, settings.trials, quiet=args.quiet, position=worker)
            try:
                results.append(
                    tune_task(
                        task,
                        db=db,
                        storage=storage,
                        evaluator=evaluator,
                        device=device,
                        env=env,
                        settings=settings,
                        on_event=bar.update if bar else None,
                    )  # fmt: skip
                )
            except Interrupted as stop:
                results.append(stop.result)
                print(format_summary(results, db=db), file=sys.stderr)
                raise
            finally:
                if bar:
                    bar.close()
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


def format_summary(results, *, db=None) -> str:
    """The end-of-run table: spec, bucket, best config, time, TFLOP/s, gain over the default,
    and which implementation won against PyTorch's SDPA backends (ratio to the runner-up)."""
    header = ("spec", "bucket", "best config", "time ms", "TFLOP/s", "vs default", "trials", "kind",
              "winner / vs next")  # fmt: skip
    from .impls import impl_label

    rows = []
    for r in results:
        best = r.best_config.short() if r.best_config else "none"
        time = f"{r.best_ms:.4g}" if r.best_config else "-"
        tfl = f"{r.tflops:.1f}" if r.best_config else "-"
        gain = f"{r.gain:.2f}x" if r.gain == r.gain else "n/a"
        kind = "measured" if r.measured else "modelled"
        if r.interrupted:
            kind += " (interrupted)"
        rows.append(
            (r.task.spec.uri(), f"{r.task.bucket[0]}x{r.task.bucket[1]}", best, time, tfl, gain,
             str(r.evaluated), kind, impl_label(r.impl, r.impl_ratio))
        )  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    if db is not None:
        lines.append(f"written to {db.url_safe}")
    return "\n".join(lines)


# -- several worker processes on one PostgreSQL study ------------------------------------------


def _worker_main(
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
    from .db import DatabaseError, connect

    try:
        gpu = _prepare_backend()
        from .search import Task
        from .spec import KernelSpec

        tasks = [Task(KernelSpec(*spec), tuple(bucket)) for spec, bucket in task_data]
        db = connect(args.db)
        _tune_all(args, opts, tasks, db, gpu, worker=index)
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


def _run_workers(args, opts, tasks, db) -> tuple[list, list[str]]:
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
    task_data = [((t.spec.head_dim, t.spec.causal, t.spec.dtype, t.spec.direction), t.bucket)
                 for t in tasks]  # fmt: skip
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
            target=_worker_main, args=(argv, opts, task_data, i, gpus, pipes[i][1]), daemon=False
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
    from .db.records import current_fingerprint
    from .search import Result, study_name
    from .sram import current_device

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
