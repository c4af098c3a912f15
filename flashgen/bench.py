"""Timing harness and correctness check for one candidate TileConfig.

The tuner's rule (the one Triton's own autotuner follows): a candidate that fails in any way
costs that candidate, never the run. So `measure` and `check` never raise for a kernel problem;
they return an `Outcome` whose status says what went wrong ("failed": compile error, out of
resources, crash; "wrong": the result disagrees with the float64 reference). A wrong kernel is
never timed, so it can never be recorded as fast.

Shapes: candidates are timed on a problem of the bucket's size with enough batch x heads to fill
the GPU (`timing_shape`), and checked first on a smaller problem whose float64 reference is cheap
(`check_shape`: on the GPU the same Triton specialisation as the timing shape; in the
interpreter a tiny, ragged, grouped-query one).

`warm_compile` runs in the tuner's worker processes: it calls the real host launchers with every
Triton launch turned into a `warmup` (compile only, nothing runs), so the kernel for exactly the
specialisation the timing process will use lands in Triton's on-disk cache ahead of time.
"""

from __future__ import annotations

import contextlib
import math
import time
import traceback
from dataclasses import dataclass

from .config import TileConfig
from .costmodel import Shape, attention_flops
from .spec import KernelSpec

STATUSES = ("ok", "failed", "wrong")
# Normalised max error allowed in the backward gradients: |ours - ref| / max(1, max |ref|).
_GRAD_TOL = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-3}
_LSE_TOL = {"float16": 2e-3, "bfloat16": 4e-3, "float32": 1e-4}
_ERROR_CHARS = 2000


@dataclass(frozen=True)
class Outcome:
    """What one candidate did: status "ok" with a median time, or why it has none."""

    status: str
    time_ms: float = math.inf
    error: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == "ok" and math.isfinite(self.time_ms)


def error_text(exc: BaseException) -> str:
    """Short, single-record description of a failure (type, message, last frames)."""
    lines = traceback.format_exception_only(type(exc), exc)
    tail = traceback.format_tb(exc.__traceback__)[-2:] if exc.__traceback__ else []
    return ("".join(lines) + "".join(tail)).strip()[:_ERROR_CHARS]


def timing_shape(spec: KernelSpec, bucket: tuple[int, int]) -> Shape:
    """The problem candidates are timed on: the bucket's lengths, ~16k query tokens per batch and
    heads x head_dim = 2048 (the shapes of the H200 baselines), so the grid fills the GPU."""
    seq_q, seq_k = bucket
    heads = max(1, min(32, 2048 // spec.head_dim))
    batch = max(1, min(16, 16384 // seq_q))
    return Shape(batch=batch, heads=heads, kv_heads=heads, seq_q=seq_q, seq_k=seq_k)


def check_shape(spec: KernelSpec, bucket: tuple[int, int], *, interpret: bool) -> Shape:
    """A cheap problem in the bucket's spirit whose float64 reference is affordable.

    On the GPU it has the timing shape's heads and lengths of the same divisibility (multiples of
    16, but not of the larger blocks: the masked edge tiles run), so Triton specialises it
    exactly like the timing shape: the check runs the very binary that is timed, and nothing is
    compiled twice. In the interpreter (no compiled binaries) it is tiny and harsher instead:
    odd lengths and two query heads per kv head (GQA indexing).
    """
    if interpret:

        def odd(n: int) -> int:
            n = min(n, 64)
            return max(1, n - 3) if n > 16 else n

        return Shape(batch=1, heads=2, kv_heads=1, seq_q=odd(bucket[0]), seq_k=odd(bucket[1]))

    def edge(n: int) -> int:
        return n if n <= 32 else min(n, 1024) - 16

    heads = timing_shape(spec, bucket).heads
    return Shape(batch=1, heads=heads, kv_heads=heads, seq_q=edge(bucket[0]), seq_k=edge(bucket[1]))


def _torch_dtype(spec: KernelSpec):
    import torch

    return getattr(torch, spec.dtype)


def make_inputs(spec: KernelSpec, shape: Shape, device: str, *, seed: int = 0, empty: bool = False):
    """q, k, v (and dO for the backward) of `shape`, random normal (or uninitialised)."""
    import torch

    dtype = _torch_dtype(spec)
    gen = None if empty else torch.Generator(device=device).manual_seed(seed)

    def tensor(heads: int, seq: int):
        size = (shape.batch, heads, seq, spec.head_dim)
        if empty:
            return torch.empty(size, dtype=dtype, device=device)
        return torch.randn(size, generator=gen, dtype=dtype, device=device)

    q = tensor(shape.heads, shape.seq_q)
    k = tensor(shape.kv_heads, shape.seq_k)
    v = tensor(shape.kv_heads, shape.seq_k)
    do = tensor(shape.heads, shape.seq_q) if spec.direction == "bwd" else None
    return q, k, v, do


def _forward_for_backward(spec: KernelSpec, q, k, v):
    """out and lse for timing a backward candidate, from the forward kernel at a safe config."""
    from .fwd import forward
    from .space import safe_config

    return forward(
        q, k, v, causal=spec.causal, scale=None, config=safe_config(spec.with_direction("fwd"))
    )


def launcher(spec: KernelSpec, cfg: TileConfig, q, k, v, do=None, out=None, lse=None):
    """A no-argument callable that runs the candidate once (what gets timed)."""
    if spec.direction == "fwd":
        from .fwd import forward

        return lambda: forward(q, k, v, causal=spec.causal, scale=None, config=cfg)
    from .bwd import backward

    scale = 1.0 / math.sqrt(spec.head_dim)
    return lambda: backward(do, q, k, v, out, lse, causal=spec.causal, scale=scale, config=cfg)


def _normalised_err(ours, ref) -> float:
    diff = (ours.double() - ref).abs().max().item()
    return diff / max(1.0, ref.abs().max().item())


def check(
    spec: KernelSpec, cfg: TileConfig, shape: Shape, device: str, *, seed: int = 0
) -> Outcome:
    """Run the candidate on `shape` and compare with the float64 reference.

    Returns Outcome("ok", time_ms=0) when it agrees, "wrong" with the error size when it does not,
    "failed" when it raises (compile error, out of resources, ...).
    """
    try:
        return _check(spec, cfg, shape, device, seed)
    except Exception as exc:  # a broken candidate is an outcome, not a crash
        return Outcome("failed", error=error_text(exc))


_CHECK_CASE: dict = {}


def _check_case(spec: KernelSpec, shape: Shape, device: str, seed: int) -> dict:
    """Inputs and float64 reference results for checking candidates of one task, computed once
    per task (every candidate is compared with the same reference). One entry kept."""
    key = (spec, shape, device, seed)
    if key in _CHECK_CASE:
        return _CHECK_CASE[key]
    from .reference import attention_ref, max_abs_err, sdpa_same_dtype, tolerance

    _CHECK_CASE.clear()
    q, k, v, do = make_inputs(spec, shape, device, seed=seed)
    case: dict = {"q": q, "k": k, "v": v, "do": do}
    if spec.direction == "fwd":
        ref_out, ref_lse = attention_ref(q, k, v, causal=spec.causal)
        sdpa_err = None
        if spec.dtype != "float32":
            sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=spec.causal), ref_out)
        rtol, atol = tolerance(q.dtype, sdpa_err)
        case.update(ref_out=ref_out, ref_lse=ref_lse, bound=atol + rtol * ref_out.abs(), atol=atol)
    else:
        leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
        ref_out, ref_lse = attention_ref(*leaves, causal=spec.causal)
        ref_out.backward(do.double())
        case.update(
            out=ref_out.detach().to(q.dtype),
            lse=ref_lse.detach().float(),
            ref_grads=[leaf.grad for leaf in leaves],
        )
    _CHECK_CASE[key] = case
    return case


def _check(spec: KernelSpec, cfg: TileConfig, shape: Shape, device: str, seed: int) -> Outcome:
    import torch

    case = _check_case(spec, shape, device, seed)
    q, k, v, do = case["q"], case["k"], case["v"], case["do"]
    if spec.direction == "fwd":
        from .fwd import forward

        out, lse = forward(q, k, v, causal=spec.causal, scale=None, config=cfg)
        err = (out.double() - case["ref_out"]).abs()
        lse_err = (lse.double() - case["ref_lse"]).abs().max().item()
        if not bool(torch.isfinite(out).all()) or bool((err > case["bound"]).any()):
            return Outcome(
                "wrong", error=f"out: max error {err.max().item():.3g} > atol {case['atol']:.3g}"
            )
        if not lse_err <= _LSE_TOL[spec.dtype]:
            return Outcome("wrong", error=f"lse: max error {lse_err:.3g} > {_LSE_TOL[spec.dtype]}")
        return Outcome("ok", time_ms=0.0)

    from .bwd import backward

    scale = 1.0 / math.sqrt(spec.head_dim)
    grads = backward(
        do, q, k, v, case["out"], case["lse"], causal=spec.causal, scale=scale, config=cfg
    )
    tol = _GRAD_TOL[spec.dtype]
    for name, ours, ref in zip(("dq", "dk", "dv"), grads, case["ref_grads"], strict=True):
        if ours is None or not bool(torch.isfinite(ours).all()):
            return Outcome("wrong", error=f"{name}: missing or not finite")
        err = _normalised_err(ours, ref)
        if not err <= tol:
            return Outcome("wrong", error=f"{name}: normalised max error {err:.3g} > {tol}")
    return Outcome("ok", time_ms=0.0)


def time_ms(
    spec: KernelSpec, cfg: TileConfig, shape: Shape, *, warmup: int = 25, rep: int = 100
) -> float:
    """Median milliseconds of one launch on CUDA (L2 flushed between runs by do_bench)."""
    import triton.testing

    fn = launcher(spec, cfg, *_timing_inputs(spec, shape))
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


_TIMING_INPUTS: dict = {}


def _timing_inputs(spec: KernelSpec, shape: Shape) -> tuple:
    """q, k, v, dO, out, lse on CUDA for timing; every candidate of a task reuses them (making
    ~100 MB of random numbers per candidate would cost more than timing it). One entry kept."""
    key = (spec, shape)
    if key not in _TIMING_INPUTS:
        _TIMING_INPUTS.clear()
        q, k, v, do = make_inputs(spec, shape, "cuda", seed=1)
        out = lse = None
        if spec.direction == "bwd":
            out, lse = _forward_for_backward(spec, q, k, v)
        _TIMING_INPUTS[key] = (q, k, v, do, out, lse)
    return _TIMING_INPUTS[key]


def measure(
    spec: KernelSpec,
    cfg: TileConfig,
    bucket: tuple[int, int],
    *,
    warmup: int = 25,
    rep: int = 100,
    phases: dict[str, float] | None = None,
) -> Outcome:
    """On CUDA: check on the check shape, then time on the bucket's shape. Never raises for a
    kernel problem; an infinite or non-positive time counts as a failure. `phases`, if given,
    accumulates the seconds spent checking ("check") and timing ("time")."""
    started = time.perf_counter()
    outcome = check(spec, cfg, check_shape(spec, bucket, interpret=False), "cuda")
    checked = time.perf_counter()
    if phases is not None:
        phases["check"] = phases.get("check", 0.0) + checked - started
    if not outcome.ok:
        return outcome
    try:
        ms = time_ms(spec, cfg, timing_shape(spec, bucket), warmup=warmup, rep=rep)
    except Exception as exc:
        return Outcome("failed", error=error_text(exc))
    finally:
        if phases is not None:
            phases["time"] = phases.get("time", 0.0) + time.perf_counter() - checked
    if not (math.isfinite(ms) and ms > 0):
        return Outcome("failed", error=f"timing gave {ms!r}")
    return Outcome("ok", time_ms=ms)


def tflops(spec: KernelSpec, shape: Shape, ms: float) -> float:
    """Useful TFLOP/s of one launch of `ms` milliseconds on `shape` (0 when not finite)."""
    if not (math.isfinite(ms) and ms > 0):
        return 0.0
    return attention_flops(spec, shape) / (ms * 1e-3) / 1e12


_WARMUP_PATCHED: set[str] = set()


def _compile_only(module) -> None:
    """Turn every Triton launch of a generated module into a compile-only warmup (this process)."""
    from triton.runtime.jit import JITFunction

    for name, obj in vars(module).items():
        if isinstance(obj, JITFunction) and f"{module.__name__}.{name}" not in _WARMUP_PATCHED:
            original = obj.run

            def run(*args, grid, warmup, _original=original, **kwargs):
                kernel = _original(*args, grid=grid, warmup=True, **kwargs)
                _load_handles(kernel)
                return kernel

            obj.run = run
            _WARMUP_PATCHED.add(f"{module.__name__}.{name}")


def _load_handles(kernel) -> None:
    """Load the compiled kernel into this worker's CUDA context, which also builds its host-side
    launcher where Triton compiles one: it lands in the shared Triton cache, so the timing
    process does not build it serially later. Best effort: the timing process redoes anything
    this step fails at (and reports the real error, e.g. out of resources)."""
    init = getattr(kernel, "_init_handles", None)
    if init is None:
        return
    try:
        import torch

        if torch.cuda.is_available():
            init()
    except Exception:  # noqa: BLE001 - the timing process owns the real outcome
        pass


def warm_compile(spec: KernelSpec, cfg: TileConfig, shapes: tuple[Shape, ...]) -> float:
    """Compile the candidate for each shape's specialisation into Triton's cache (worker side).

    Runs in a worker process of the tuner's pool: nothing is launched, so the GPU stays free for
    the timing process. Returns the seconds it took. Raises whatever the compiler raises.
    """
    from .codegen import load

    start = time.perf_counter()
    _compile_only(load(spec))
    for shape in shapes:
        q, k, v, do = make_inputs(spec, shape, "cuda", empty=True)
        out = lse = None
        if spec.direction == "bwd":
            out = q.new_empty(q.shape)
            lse = q.new_empty(q.shape[:3], dtype=_torch_float32())
        launcher(spec, cfg, q, k, v, do, out, lse)()
    return time.perf_counter() - start


def safe_config_of(spec: KernelSpec) -> TileConfig:
    from .space import safe_config

    return safe_config(spec)


def _torch_float32():
    import torch

    return torch.float32


# -- evaluators: what the search calls for each candidate ------------------------------------


class ModelledEvaluator:
    """No GPU: check each candidate in Triton's interpreter at a tiny size, rank it with the cost
    model (`flashgen.costmodel`) for the planning target `device`.

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
        from .costmodel import estimate_ms

        shape = check_shape(task.spec, task.bucket, interpret=True)
        key = (task.spec, cfg.block_m, cfg.block_n, shape)
        if key not in self._checked:
            self.checks += 1
            self._checked[key] = check(task.spec, cfg, shape, "cpu")
        outcome = self._checked[key]
        if not outcome.ok:
            return outcome
        ms = estimate_ms(task.spec, cfg, timing_shape(task.spec, task.bucket), self.device)
        if not math.isfinite(ms):
            return Outcome("failed", error="cost model: no program fits an SM")
        return Outcome("ok", time_ms=ms)

    def close(self) -> None:
        pass


def _pool_init() -> None:
    """Worker start-up: load torch and Triton once, bind the GPU, before the first candidate."""
    import torch
    import triton  # noqa: F401

    if torch.cuda.is_available():
        torch.cuda.init()
        _driver_ready()
        _triton_ready(launch=False)


def _triton_ready(*, launch: bool) -> None:
    """One trivial compile in this process, so that Triton's one-off first-compile costs are
    start-up, not the first candidate's (`flashgen.warm`)."""
    try:
        from .warm import warm_triton

        warm_triton(launch=launch)
    except Exception:  # noqa: BLE001 - only costs time later if it fails
        pass


def _driver_ready() -> None:
    """Make Triton set up its CUDA driver helpers now (it builds a small C module on first use
    in a fresh cache): start-up cost, not a candidate's."""
    try:
        from triton.runtime import driver

        driver.active.get_current_target()
        driver.active.utils  # noqa: B018 - the attribute access is what builds it
    except Exception:  # noqa: BLE001 - only costs time later if it fails
        pass


def _torch_ready() -> None:
    """Load what the first candidate's check would otherwise load on the clock: cuBLAS (the
    float64 reference), the autograd engine's CUDA thread (the backward's float64 reference: its
    first run sets up a CUDA context and cuBLAS handle for that thread, seconds on the H200) and
    PyTorch's attention kernels (the half-precision yardstick)."""
    import torch
    import torch.nn.functional as F

    from .reference import attention_ref

    with contextlib.suppress(Exception):
        for dtype in (torch.float64, torch.float32):
            ones = torch.ones(16, 16, dtype=dtype, device="cuda")
            (ones @ ones).sum().item()
        x = torch.randn(1, 2, 32, 16, dtype=torch.float64, device="cuda", requires_grad=True)
        for causal in (False, True):
            out, _lse = attention_ref(x, x, x, causal=causal)
            out.sum().backward()
        torch.cuda.synchronize()
        for dtype in (torch.bfloat16, torch.float16):
            for d in (64, 128):
                q = torch.ones(1, 2, 64, d, dtype=dtype, device="cuda")
                for causal in (False, True):
                    F.scaled_dot_product_attention(q, q, q, is_causal=causal).sum().item()


def _ready(delay: float) -> int:
    """A no-op pool task (keeps a worker busy briefly so that every worker gets started)."""
    import os

    time.sleep(delay)
    return os.getpid()


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
                initializer=_pool_init,
            )

    def warm_up(self) -> float:
        """Start every pool worker now (import torch, Triton, CUDA); returns the seconds taken.
        Lets callers keep process start-up out of what they time."""
        start = time.perf_counter()
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()
            _driver_ready()
            _torch_ready()
            _triton_ready(launch=True)
        if self._pool is not None:
            try:
                for f in [self._pool.submit(_ready, 0.2) for _ in range(self.compile_workers)]:
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
            self._submit((task.spec, task.bucket, None), fwd, safe_config_of(fwd), task)
        self._submit((task.spec, task.bucket, cfg), task.spec, cfg, task)

    def _submit(self, key, spec: KernelSpec, cfg: TileConfig, task) -> None:
        if self._pool is None or key in self._futures:
            return
        shapes: tuple[Shape, ...] = (
            check_shape(task.spec, task.bucket, interpret=False),
            timing_shape(task.spec, task.bucket),
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
            _check_case(task.spec, check_shape(task.spec, task.bucket, interpret=False), "cuda", 0)
            _timing_inputs(task.spec, timing_shape(task.spec, task.bucket))
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
        return measure(
            task.spec, cfg, task.bucket, warmup=self.warmup, rep=self.rep, phases=self.phases
        )

    def retime(self, task, cfgs: list[TileConfig], rounds: int = 2) -> dict[TileConfig, float]:
        """Time `cfgs` again, interleaved (a b c a b c), on a GPU that is busy by now; the mean
        of the rounds per config. A config that fails here gets inf."""
        started = time.perf_counter()
        runs: dict[TileConfig, list[float]] = {cfg: [] for cfg in cfgs}
        shape = timing_shape(task.spec, task.bucket)
        for _ in range(rounds):
            for cfg in cfgs:
                try:
                    ms = time_ms(task.spec, cfg, shape, warmup=self.warmup, rep=self.rep)
                except Exception:  # noqa: BLE001 - it passed before; count it out, do not raise
                    ms = math.inf
                runs[cfg].append(ms)
        self.phases["confirm"] = self.phases.get("confirm", 0.0) + time.perf_counter() - started
        return {cfg: sum(ms) / len(ms) for cfg, ms in runs.items()}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
