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
import contextlib
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


def _csv_items(text: str, flag: str) -> list[str]:
    """The comma-separated items of a flag; an empty list or an empty item is refused."""
    items = [part.strip() for part in str(text).split(",")]
    if not any(items):
        raise ValueError(f"{flag} needs at least one value, got {text!r}")
    if not all(items):
        raise ValueError(f"{flag} has an empty item in {text!r} (write e.g. 64,128)")
    return items


def _csv_ints(text: str, flag: str, low: int = 1, high: int | None = None) -> list[int]:
    values = []
    for item in _csv_items(text, flag):
        try:
            values.append(int(item))
        except ValueError:
            raise ValueError(f"{flag} takes comma-separated integers, got {item!r}") from None
    for value in values:
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f">= {low}"
            raise ValueError(f"{flag} takes integers {span}, got {value}")
    return values


def _csv_names(text: str, flag: str, allowed: tuple[str, ...]) -> list[str]:
    names = _csv_items(text, flag)
    for name in names:
        if name not in allowed:
            raise ValueError(f"{flag}: {name!r} is not one of {', '.join(allowed)}")
    return list(dict.fromkeys(names))


# The longest sequence length a record can be stored for (`flashgen.db.records.MAX_BUCKET`).
MAX_SEQ_LEN = 1 << 30
SEED_LIMIT = 2**32 - 1  # Optuna's samplers seed numpy with it


def check_options(args: argparse.Namespace) -> None:
    """Every flag the user gave, checked before torch loads and before anything is printed:
    a typo costs a one-line error, never a run that tunes nothing (ValueError names the flag)."""
    from ..core.spec import DIRECTIONS, DTYPES, MAX_HEAD_DIM, MIN_HEAD_DIM

    if args.head_dim is not None:
        _csv_ints(args.head_dim, "--head-dim", MIN_HEAD_DIM, MAX_HEAD_DIM)
    if args.dtype is not None:
        _csv_names(args.dtype, "--dtype", DTYPES)
    if args.direction is not None:
        _csv_names(args.direction, "--direction", DIRECTIONS)
    seq_q = _csv_ints(str(args.seq_len or GPU_DEFAULTS["seq_len"]), "--seq-len", 1, MAX_SEQ_LEN)
    if args.seq_k is not None:
        seq_k = _csv_ints(args.seq_k, "--seq-k", 1, MAX_SEQ_LEN)
        if len(seq_k) not in (1, len(seq_q)):
            raise ValueError(
                f"--seq-k takes one length or one per --seq-len ({len(seq_q)}), got {len(seq_k)}"
            )
    if args.trials is not None and args.trials < 1:
        raise ValueError(f"--trials must be >= 1, got {args.trials}")
    if args.patience is not None and args.patience < 0:
        raise ValueError(f"--patience must be >= 0 (0: never stop early), got {args.patience}")
    if not 0 <= args.seed <= SEED_LIMIT:
        raise ValueError(f"--seed must be between 0 and {SEED_LIMIT}, got {args.seed}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if args.compile_workers is not None and args.compile_workers < 0:
        raise ValueError(f"--compile-workers must be >= 0, got {args.compile_workers}")
    if args.pending:
        given = [
            flag
            for flag, value in (
                ("--head-dim", args.head_dim),
                ("--dtype", args.dtype),
                ("--causal", args.causal),
                ("--seq-len", args.seq_len),
                ("--seq-k", args.seq_k),
                ("--direction", args.direction),
            )  # fmt: skip
            if value is not None
        ]
        if given:
            raise ValueError(
                f"--pending tunes the shapes the database lists; it does not take {', '.join(given)}"
            )


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
    from ..core.spec import DIRECTIONS, DTYPES, KernelSpec, shape_bucket
    from .tasks import Task

    head_dims = list(dict.fromkeys(_csv_ints(str(opts["head_dim"]), "--head-dim")))
    dtypes = _csv_names(str(opts["dtype"]), "--dtype", DTYPES)
    directions = _csv_names(str(opts["direction"]), "--direction", DIRECTIONS)
    causals = {"both": [False, True], "true": [True], "false": [False]}[opts["causal"]]
    seq_q = _csv_ints(str(opts["seq_len"]), "--seq-len", 1, MAX_SEQ_LEN)
    seq_k_list = _csv_ints(seq_k, "--seq-k", 1, MAX_SEQ_LEN) if seq_k else seq_q
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
    check_options(args)  # before torch loads and before any banner
    gpu = _prepare_backend()
    opts = _resolve(args, gpu)
    tasks = [] if args.pending else build_tasks(opts, args.seq_k)
    from ..db import connect
    from ..runtime.lookup import current_fingerprint

    db = connect(args.db)  # a fault is one line (DatabaseError), printed by flashgen.cli
    from .studies import check_workers

    check_workers(db, args.workers)  # several workers on SQLite: refused before any work
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
    env = current_fingerprint(current_device())
    failures: list[str] = []
    with _database_faults(db):
        try:
            if args.workers > 1:
                results, failures = _run_workers(args, opts, tasks, db)
            else:
                results = _tune_all(args, opts, tasks, db, gpu, worker=0)
        except _Stopped as stop:  # the table of what is stored, then exit status 130
            print(format_summary(stop.results, db=db, env=env))
            raise KeyboardInterrupt from None
        if args.pending and not failures:  # a failed worker may have left some of them untuned
            for task in tasks:
                db.clear_pending(task.spec, task.bucket)
        print(format_summary(results, db=db, env=env))
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


class _Stopped(KeyboardInterrupt):
    """Ctrl-C in `_tune_all`, carrying the results so far (the interrupted task's included)."""

    def __init__(self, results: list) -> None:
        super().__init__("tuning interrupted")
        self.results = results


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


def _tune_all(args, opts, tasks, db, gpu: bool, worker: int) -> list:
    """Tune every task in this process; returns the per-task results."""
    import optuna

    from ..hardware.sram import current_device
    from ..runtime.lookup import current_fingerprint
    from .evaluate import MeasuredEvaluator, ModelledEvaluator
    from .search import tune_task
    from .studies import open_storage
    from .tasks import Interrupted

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
                raise _Stopped(results) from None
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


def stored_rows(results, db, env) -> list:
    """`results` as the database holds them: for each task the stored record's config, time,
    trial count and winner, so that the table printed and `flashgen db show` never disagree.

    The record can differ from this run's best: the keep-best rule kept an earlier record that
    was as good or better (a tie keeps the stored one), or another worker stored a better one.
    Such rows say "kept stored". The gain over the default stays this run's own measurement
    (both times from the same run); it is left out where the stored record is not this run's."""
    rows = []
    for r in results:
        rec = db.get(r.task.spec, r.task.bucket, env)
        if rec is None:
            rows.append((r, None, False))
            continue
        # A tie with this run's best is this run's result too (the stored twin was kept).
        ours = r.best_config is not None and (rec.time_ms, rec.measured) == (r.best_ms, r.measured)
        rows.append((r, rec, not ours))
    return rows


def format_summary(results, *, db=None, env=None) -> str:
    """The end-of-run table: spec, bucket, best config, time, TFLOP/s, gain over the default,
    evaluated candidates, and which implementation won against PyTorch's SDPA backends (ratio
    to the runner-up). With `db` and `env`, every value but the gain is read back from the
    database (`stored_rows`)."""
    header = ("spec", "bucket", "best config", "time ms", "TFLOP/s", "vs default", "trials", "kind",
              "winner / vs next")  # fmt: skip
    from ..core.impls import impl_label

    if db is not None and env is not None:
        entries = stored_rows(results, db, env)
    else:
        entries = [(r, None, False) for r in results]
    rows = []
    for r, rec, kept in entries:
        if rec is not None:
            config, ms, tfl, trials, measured = (rec.config, rec.time_ms, rec.tflops,
                                                 rec.n_trials, rec.measured)  # fmt: skip
            impl, ratio = rec.impl, rec.impl_ratio
        else:
            config, ms, tfl, trials, measured = (r.best_config, r.best_ms, r.tflops,
                                                 r.evaluated, r.measured)  # fmt: skip
            impl, ratio = r.impl, r.impl_ratio
        gain = r.gain if not kept else float("nan")
        kind = "measured" if measured else "modelled"
        if kept:
            kind += " (kept stored)"
        if r.interrupted:
            kind += " (interrupted)"
        rows.append(
            (r.task.spec.uri(), f"{r.task.bucket[0]}x{r.task.bucket[1]}",
             config.short() if config else "none", f"{ms:.4g}" if config else "-",
             f"{tfl:.1f}" if config else "-", f"{gain:.2f}x" if gain == gain else "n/a",
             str(trials), kind, impl_label(impl, ratio))
        )  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    if db is not None:
        lines.append(f"written to {db.url_safe}")
    return "\n".join(line.rstrip() for line in lines)


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
    from ..db import DatabaseError, connect

    try:
        gpu = _prepare_backend()
        from ..core.spec import KernelSpec
        from .tasks import Task

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
