"""Evaluators: what the tuner's search calls for each candidate.

Both implement `Evaluator` (`measured`, `start(task, cfg)`, `finish(task, cfg) -> Outcome`,
`close()`); `flashgen.tune.search.Search` needs nothing else. `ModelledEvaluator` (no GPU)
checks a candidate in Triton's interpreter and ranks it with the cost model.
`MeasuredEvaluator` (CUDA) compiles upcoming candidates in the compile pool
(`flashgen.tune.pool`) while the timing process checks and times the current one
(`bench.measure`); it also re-times the finalists (`retime`) and times PyTorch's SDPA backends
against the best (`compare`), which `flashgen.tune.finalize` uses where an evaluator has them.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Protocol, runtime_checkable

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from ..hardware.costmodel import Shape
from ..hardware.tiles import safe_config
from . import bench, sdpa
from .bench import Outcome, error_text
from .pool import driver_ready, pool_init, ready, torch_ready, triton_ready, warm_compile


@runtime_checkable
class Evaluator(Protocol):
    """What the search calls per candidate. `start` may begin work ahead (a compile) and
    return at once; `finish` returns the candidate's `Outcome` and raises only for a bug (the
    search then counts the candidate as failed). `measured` says whether times are measured on
    this GPU (True) or modelled for a planning target (False): it decides what kind of record
    the search stores."""

    measured: bool

    def start(self, task, cfg: TileConfig) -> None: ...

    def finish(self, task, cfg: TileConfig) -> Outcome: ...

    def close(self) -> None: ...


class ModelledEvaluator:
    """No GPU: check each candidate in Triton's interpreter at a tiny size, rank it with the cost
    model (`flashgen.hardware.costmodel`) for the planning target `device`.

    The interpreter ignores num_warps and num_stages, so the check result is cached per
    (spec, block_m, block_n, check shape): a second config differing only in warps or stages
    runs the very same interpreted program.
    """

    measured = False

    def __init__(self, device) -> None:
        self.device = device
        self._checked: dict[tuple, Outcome] = {}
        self.checks = 0

    def start(self, task, cfg: TileConfig) -> None:
        """Nothing to compile ahead in the interpreter."""

    def finish(self, task, cfg: TileConfig) -> Outcome:
        from ..hardware.costmodel import estimate_ms

        shape = bench.check_shape(task.spec, task.bucket, interpret=True)
        key = (task.spec, cfg.block_m, cfg.block_n, shape)
        if key not in self._checked:
            self.checks += 1
            self._checked[key] = bench.check(task.spec, cfg, shape, "cpu")
        outcome = self._checked[key]
        if not outcome.ok:
            return outcome
        ms = estimate_ms(task.spec, cfg, bench.timing_shape(task.spec, task.bucket), self.device)
        if not math.isfinite(ms):
            return Outcome("failed", error="cost model: no program fits an SM")
        return Outcome("ok", time_ms=ms)

    def close(self) -> None:
        pass


class MeasuredEvaluator:
    """On CUDA: compile upcoming candidates in `compile_workers` processes (`warm_compile`)
    while this process checks and times the current one (`measure`).

    The pool only fills Triton's on-disk cache; the timing process compiles again on a miss, so
    a worker problem never decides a candidate's fate. The one exception is a compile that
    takes longer than `compile_timeout_s`: that candidate is a failure ("compile time-out"),
    since the timing process would hang on it the same way.
    """

    measured = True

    def __init__(
        self,
        *,
        compile_workers: int = 0,
        compile_timeout_s: float = 300.0,
        warmup: int = 25,
        rep: int = 100,
    ) -> None:
        self.compile_workers = compile_workers
        self.compile_timeout_s = compile_timeout_s
        self.warmup = warmup
        self.rep = rep
        self._futures: dict = {}
        self._prepared: set = set()
        self._pool = None
        # How the ahead-of-time compiles went: "ok" / "error" / "timeout" counts and the first
        # error (a worker problem only costs speed, so it is reported, not raised).
        self.warm_stats: dict = {"ok": 0, "error": 0, "timeout": 0, "first_error": ""}
        # Seconds the timing process spent, by phase: per-task set-up ("prepare"), waiting for
        # the pool's compile ("wait"), checking ("check"), timing ("time") and re-timing the
        # finalists (`retime`, "confirm"). Where a short search's wall time goes.
        self.phases: dict[str, float] = {
            "prepare": 0.0,
            "wait": 0.0,
            "check": 0.0,
            "time": 0.0,
            "confirm": 0.0,
        }
        if compile_workers > 0:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(
                max_workers=compile_workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=pool_init,
            )

    def warm_up(self) -> float:
        """Start every pool worker now (import torch, Triton, CUDA); returns the seconds taken.
        Lets callers keep process start-up out of what they time."""
        start = time.perf_counter()
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
            driver_ready()
            torch_ready()
            triton_ready(launch=True)
        if self._pool is not None:
            try:
                for f in [self._pool.submit(ready, 0.2) for _ in range(self.compile_workers)]:
                    f.result()
            except Exception as exc:  # no pool then: the timing process compiles
                self.warm_stats["error"] += 1
                self.warm_stats["first_error"] = self.warm_stats["first_error"] or error_text(exc)
                self.close()
        return time.perf_counter() - start

    def start(self, task, cfg: TileConfig) -> None:
        if self._pool is None:
            return
        if task.spec.direction == "bwd" and (task.spec, task.bucket) not in self._prepared:
            # The backward is timed on out/lse from the forward kernel at its safe config: have
            # the pool compile that too, first, instead of the timing process later.
            fwd = task.spec.with_direction("fwd")
            self._submit((task.spec, task.bucket, None), fwd, safe_config(fwd), task)
        self._submit((task.spec, task.bucket, cfg), task.spec, cfg, task)

    def _submit(self, key, spec: KernelSpec, cfg: TileConfig, task) -> None:
        if self._pool is None or key in self._futures:
            return
        shapes: tuple[Shape, ...] = (
            bench.check_shape(task.spec, task.bucket, interpret=False),
            bench.timing_shape(task.spec, task.bucket),
        )
        if cfg != key[2]:  # the forward for the backward's inputs: timing shape only
            shapes = shapes[1:]
        try:
            self._futures[key] = self._pool.submit(warm_compile, spec, cfg, shapes)
        except Exception as exc:  # a broken pool (a worker died): compile in-process
            self.warm_stats["error"] += 1
            self.warm_stats["first_error"] = self.warm_stats["first_error"] or error_text(exc)
            self.close()

    def _prepare(self, task) -> None:
        """Per-task set-up of the timing process (reference results, timing inputs, the
        backward's forward pass), done while the pool still compiles the first candidates."""
        from concurrent.futures import TimeoutError as FutureTimeout

        key = (task.spec, task.bucket)
        if key in self._prepared:
            return
        self._prepared.add(key)
        fwd_future = self._futures.pop((task.spec, task.bucket, None), None)
        try:
            if fwd_future is not None:
                with contextlib.suppress(Exception, FutureTimeout):
                    fwd_future.result(timeout=self.compile_timeout_s)
            bench.check_case(
                task.spec, bench.check_shape(task.spec, task.bucket, interpret=False), "cuda", 0
            )
            bench.timing_inputs(task.spec, bench.timing_shape(task.spec, task.bucket))
        except Exception:  # noqa: BLE001 - `measure` redoes it and reports the error
            pass

    def finish(self, task, cfg: TileConfig) -> Outcome:
        from concurrent.futures import TimeoutError as FutureTimeout

        started = time.perf_counter()
        self._prepare(task)
        prepared = time.perf_counter()
        self.phases["prepare"] += prepared - started
        future = self._futures.pop((task.spec, task.bucket, cfg), None)
        if future is not None:
            try:
                future.result(timeout=self.compile_timeout_s)
                self.warm_stats["ok"] += 1
            except FutureTimeout:
                future.cancel()
                self.warm_stats["timeout"] += 1
                return Outcome(
                    "failed", error=f"compile time-out after {self.compile_timeout_s:.0f} s"
                )
            except Exception as exc:  # the timing process compiles again, reports the real error
                self.warm_stats["error"] += 1
                if not self.warm_stats["first_error"]:
                    self.warm_stats["first_error"] = error_text(exc)
            finally:
                self.phases["wait"] += time.perf_counter() - prepared
        return bench.measure(
            task.spec, cfg, task.bucket, warmup=self.warmup, rep=self.rep, phases=self.phases
        )

    def retime(
        self, task, cfgs: list[TileConfig], rounds: int = 2, rep: int | None = None
    ) -> dict[TileConfig, float]:
        """Time `cfgs` again, interleaved (a b c a b c), on a GPU that is busy by now; the median
        of the rounds per config (`rep`: do_bench's rep in ms, default the evaluator's). A config
        that fails here gets inf."""
        started = time.perf_counter()
        runs: dict[TileConfig, list[float]] = {cfg: [] for cfg in cfgs}
        shape = bench.timing_shape(task.spec, task.bucket)
        for _ in range(rounds):
            for cfg in cfgs:
                try:
                    ms = bench.time_ms(
                        task.spec, cfg, shape, warmup=self.warmup, rep=rep or self.rep
                    )
                except Exception:  # noqa: BLE001 - it passed before; count it out, do not raise
                    ms = math.inf
                runs[cfg].append(ms)
        self.phases["confirm"] += time.perf_counter() - started
        return {cfg: statistics.median(ms) for cfg, ms in runs.items()}

    def compare(
        self, task, cfg: TileConfig, impls, rounds: int = 2
    ) -> tuple[dict[str, float], dict[str, str]]:
        """flashgen (`cfg`, or the Hopper forward where the run time launches that:
        `bench.runtime_launcher`) against PyTorch's SDPA backends `impls` on this task: each backend is
        checked on the task's check case (float64 reference, the candidates' tolerances), then
        the ones that pass and `cfg` are timed back to back, interleaved (a b c a b c), median of
        the rounds, on the task's timing shape. Returns (implementation -> ms, inf where it did
        not run; implementation -> why it did not run)."""
        started = time.perf_counter()
        check = bench.check_shape(task.spec, task.bucket, interpret=False)
        shape = bench.timing_shape(task.spec, task.bucket)
        why: dict[str, str] = {}
        passed = []
        for impl in impls:
            outcome = sdpa.check_sdpa(task.spec, impl, check, "cuda")
            if outcome.ok:
                passed.append(impl)
            else:
                why[impl] = f"{outcome.status}: {outcome.error.splitlines()[0][:200]}"
        runs: dict[str, list[float]] = {"flashgen": [], **{impl: [] for impl in passed}}
        for _ in range(rounds):
            for impl in runs:
                try:
                    if impl == "flashgen":
                        ms = bench.time_ms(
                            task.spec, cfg, shape, warmup=self.warmup, rep=self.rep, as_run=True
                        )
                    else:
                        ms = sdpa.sdpa_time_ms(
                            task.spec, impl, shape, warmup=self.warmup, rep=self.rep
                        )
                except Exception as exc:  # noqa: BLE001 - counted out, never the run
                    why[impl] = f"failed: {error_text(exc).splitlines()[0][:200]}"
                    ms = math.inf
                runs[impl].append(ms)
        self.phases["compare"] = self.phases.get("compare", 0.0) + time.perf_counter() - started
        times = {impl: statistics.median(ms) for impl, ms in runs.items()}
        times.update({impl: math.inf for impl in impls if impl not in times})
        return times, why

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
