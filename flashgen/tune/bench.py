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

PyTorch's SDPA backends, checked and timed the same way, are in `flashgen.tune.sdpa`; the
evaluators that the search calls are in `flashgen.tune.evaluate`.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from ..hardware.costmodel import Shape, attention_flops

STATUSES = ("ok", "failed", "wrong")
# Normalised max error allowed in the backward gradients: |ours - ref| / max(1, max |ref|).
GRAD_TOL = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-3}
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


def bench_window(spec: KernelSpec, q, k) -> tuple[int, int] | None:
    """The window a windowed spec is timed and checked with: a band covering every key (sizes
    are run-time arguments, so the tuned config serves every window; a covering band walks all
    the tiles the unwindowed kernel walks, the slowest case, and matches its reference)."""
    if not spec.window:
        return None
    reach = max(q.shape[2], k.shape[2])
    return (reach, reach)


# The cap a softcapped spec is timed and checked with: Gemma-2's, so the kernel computes (and
# pays for) the tanh and, where the run time does at such a cap, runs without the running max
# (bfloat16 and float32: `flashgen.kernels.plans.small_cap`); a cap far above the scores would
# time the running-max kernel the run time no longer launches there. The checks' float64
# reference is capped alike.
BENCH_SOFTCAP = 50.0


def bench_softcap(spec: KernelSpec) -> float | None:
    return BENCH_SOFTCAP if spec.softcap else None


# What a dropout spec is timed and checked with: p = 0 keeps every probability (the uniform
# draws are >= 0), so the kernel draws the whole mask (and pays for it) while the undropped
# reference holds; the seed is fixed so the timing does not depend on a generator.
BENCH_DROPOUT = (0.0, 2**40 + 1)


def bench_dropout(spec: KernelSpec):
    return BENCH_DROPOUT if spec.dropout else None


def bench_alibi(spec: KernelSpec, q):
    """The slopes an ALiBi spec is timed and checked with: zeros (run-time data, so the tuned
    config serves every slope; the kernel computes and adds the bias, 0, so it pays for it while
    the unbiased reference holds), as the kernels take them (float32 [B, Hq])."""
    if not spec.alibi:
        return None
    import torch

    return torch.zeros(q.shape[1], dtype=torch.float32, device=q.device).expand(q.shape[:2])


def bench_mask(spec: KernelSpec, q, k):
    """The mask tensor an attn_mask spec is timed and checked with: a key-padding mask that
    hides nothing (every key True, or every bias 0) of shape [B, 1, 1, Sk], expanded to
    [B, Hq, Sq, Sk] as the op passes masks to the launchers. Masks are run-time data, so the
    tuned config serves every mask of the spec; this layout is the common one (HF's and
    nn.MultiheadAttention's key padding, read as one vector of keys a tile, as the op reads
    them), the kernel reads and applies it on every tile, and the unmasked float64 reference
    holds. Without it the tuner ran the spec's record on the unmasked kernel."""
    if not spec.attn_mask:
        return None
    import torch

    batch, heads, seq_q = q.shape[:3]
    size = (batch, 1, 1, k.shape[2])
    if spec.attn_mask == "bool":
        mask = torch.ones(size, dtype=torch.bool, device=q.device)
    else:
        mask = torch.zeros(size, dtype=q.dtype, device=q.device)
    return mask.expand(batch, heads, seq_q, k.shape[2])


def bench_bounds(spec: KernelSpec, q, k):
    """The per-sequence ranges a spec with lengths is timed and checked with: every row and key
    valid (the ranges are run-time data, so the tuned config serves every padding; all tiles
    walked, the slowest case, and the unpadded reference holds)."""
    if not spec.lengths:
        return None
    from ..kernels.padding import bounds

    return bounds(q.shape[0], q.shape[2], k.shape[2], None, None, "right", q.device)


def _mask_kwargs(spec: KernelSpec, q, k) -> dict:
    """The window/softcap/bounds/mask/dropout/ALiBi keywords of a launch for `spec`: none at
    all for a plain spec, so the plain launchers are called exactly as before."""
    kwargs = {
        "window": bench_window(spec, q, k),
        "softcap": bench_softcap(spec),
        "bounds": bench_bounds(spec, q, k),
        "mask": bench_mask(spec, q, k),
        "dropout": bench_dropout(spec),
        "alibi": bench_alibi(spec, q),
    }
    return {name: value for name, value in kwargs.items() if value is not None}


def _forward_for_backward(spec: KernelSpec, q, k, v):
    """out and lse for timing a backward candidate, from the forward kernel at a safe config."""
    from ..hardware.tiles import safe_config
    from ..kernels.fwd import forward

    return forward(
        q,
        k,
        v,
        causal=spec.causal,
        scale=None,
        config=safe_config(spec.with_direction("fwd")),
        **_mask_kwargs(spec, q, k),
    )


def launcher(spec: KernelSpec, cfg: TileConfig, q, k, v, do=None, out=None, lse=None,
             kind: str | None = None):  # fmt: skip
    """A no-argument callable that runs the candidate once (what gets timed). A backward runs
    the kind the tuner searches configs for (`_kind_kwargs`), or `kind` (fast mode) if given."""
    if spec.direction == "fwd":
        from ..kernels.fwd import forward

        extra = _mask_kwargs(spec, q, k)
        return lambda: forward(q, k, v, causal=spec.causal, scale=None, config=cfg, **extra)
    from ..kernels.bwd import backward

    scale = 1.0 / math.sqrt(spec.head_dim)
    kinds = _kind_kwargs(spec, cfg) if kind is None else {"kind": kind, "deterministic": False}
    extra = {**_mask_kwargs(spec, q, k), **kinds}
    return lambda: backward(
        do, q, k, v, out, lse, causal=spec.causal, scale=scale, config=cfg, **extra
    )


def _kind_kwargs(spec: KernelSpec, cfg: TileConfig) -> dict:
    """The backward kind a tuning trial times and checks: the default (fast-mode) one, whatever
    torch's deterministic flag says in the tuning process (`flashgen.tune.space.Space.fits`);
    and the dQ kernel's config the run time will pair with `cfg` (flashgen.hardware.dq_tiles)."""
    from ..kernels.bwd import dq_config_for
    from .space import tuned_backward_kind

    kind = tuned_backward_kind(spec)
    return {"kind": kind, "deterministic": kind == "split", "dq_config": dq_config_for(spec, cfg)}


def normalised_err(ours, ref) -> float:
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


def check_case(spec: KernelSpec, shape: Shape, device: str, seed: int) -> dict:
    """Inputs and float64 reference results for checking candidates of one task, computed once
    per task (every candidate is compared with the same reference). One entry kept."""
    key = (spec, shape, device, seed)
    if key in _CHECK_CASE:
        return _CHECK_CASE[key]
    from ..kernels.reference import attention_ref, max_abs_err, sdpa_same_dtype, tolerance

    _CHECK_CASE.clear()
    q, k, v, do = make_inputs(spec, shape, device, seed=seed)
    case: dict = {"q": q, "k": k, "v": v, "do": do}
    if spec.direction == "fwd":
        ref_out, ref_lse = _reference(spec, q, k, v)
        sdpa_err = None
        if spec.dtype != "float32":
            # PyTorch's own error in this dtype, against the uncapped result it computes (SDPA
            # has no softcap): the tolerance tracks the dtype, not the cap
            plain = (
                ref_out
                if bench_softcap(spec) is None
                else attention_ref(q, k, v, causal=spec.causal)[0]
            )
            sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=spec.causal), plain)
        rtol, atol = tolerance(q.dtype, sdpa_err)
        case.update(ref_out=ref_out, ref_lse=ref_lse, bound=atol + rtol * ref_out.abs(), atol=atol)
    else:
        leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
        ref_out, ref_lse = _reference(spec, *leaves)
        ref_out.backward(do.double())
        case.update(
            out=ref_out.detach().to(q.dtype),
            lse=ref_lse.detach().float(),
            ref_grads=[leaf.grad for leaf in leaves],
        )
    _CHECK_CASE[key] = case
    return case


def _reference(spec: KernelSpec, q, k, v):
    """float64 (out, lse) of a candidate's check: plain attention, its scores capped with
    `bench_softcap` for a softcapped spec (the other extras' bench values leave the plain
    result: the widest window, full lengths, a mask hiding nothing, p = 0, zero slopes)."""
    from ..kernels.reference import attention_ref, hidden_ref, rows_ref, scores_ref

    cap = bench_softcap(spec)
    if cap is None:
        return attention_ref(q, k, v, causal=spec.causal)
    hide = hidden_ref(q.shape[2], k.shape[2], causal=spec.causal).to(q.device)
    return rows_ref(scores_ref(q, k, softcap=cap).masked_fill(hide, float("-inf")), v)


def _check(spec: KernelSpec, cfg: TileConfig, shape: Shape, device: str, seed: int) -> Outcome:
    import torch

    case = check_case(spec, shape, device, seed)
    q, k, v, do = case["q"], case["k"], case["v"], case["do"]
    if spec.direction == "fwd":
        from ..kernels.fwd import forward

        out, lse = forward(
            q,
            k,
            v,
            causal=spec.causal,
            scale=None,
            config=cfg,
            **_mask_kwargs(spec, q, k),
        )
        err = (out.double() - case["ref_out"]).abs()
        lse_err = (lse.double() - case["ref_lse"]).abs().max().item()
        if not bool(torch.isfinite(out).all()) or bool((err > case["bound"]).any()):
            return Outcome(
                "wrong", error=f"out: max error {err.max().item():.3g} > atol {case['atol']:.3g}"
            )
        if not lse_err <= _LSE_TOL[spec.dtype]:
            return Outcome("wrong", error=f"lse: max error {lse_err:.3g} > {_LSE_TOL[spec.dtype]}")
        return Outcome("ok", time_ms=0.0)

    from ..kernels.bwd import backward

    scale = 1.0 / math.sqrt(spec.head_dim)
    grads = backward(
        do,
        q,
        k,
        v,
        case["out"],
        case["lse"],
        causal=spec.causal,
        scale=scale,
        config=cfg,
        **_mask_kwargs(spec, q, k),
        **_kind_kwargs(spec, cfg),
    )
    tol = GRAD_TOL[spec.dtype]
    for name, ours, ref in zip(("dq", "dk", "dv"), grads, case["ref_grads"], strict=True):
        if ours is None or not bool(torch.isfinite(ours).all()):
            return Outcome("wrong", error=f"{name}: missing or not finite")
        err = normalised_err(ours, ref)
        if not err <= tol:
            return Outcome("wrong", error=f"{name}: normalised max error {err:.3g} > {tol}")
    return Outcome("ok", time_ms=0.0)


def time_ms(
    spec: KernelSpec,
    cfg: TileConfig,
    shape: Shape,
    *,
    warmup: int = 25,
    rep: int = 100,
    as_run: bool = False,
) -> float:
    """Median milliseconds of one launch on CUDA (L2 flushed between runs by do_bench).

    `as_run`: time what the run time launches for this record (`runtime_launcher`), not the
    candidate `cfg` of the portable family alone: the comparison with PyTorch's SDPA backends
    decides which implementation the op calls, so it must time the kernel the op would run."""
    import triton.testing

    make = runtime_launcher if as_run else launcher
    fn = make(spec, cfg, *timing_inputs(spec, shape))
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def runtime_launcher(spec: KernelSpec, cfg: TileConfig, q, k, v, do=None, out=None, lse=None):
    """`launcher`, except where the run time launches another kernel than the record's config:
    a forward the Hopper (sm_90) family takes (`flashgen.kernels.hopper.choose`: its own
    configs, `flashgen.hardware.hopper_tiles`; the record's portable config is not used) is
    launched as the run time launches it, without a portable config; a backward whose shape
    the hopper kind takes by default (`flashgen.kernels.bwd_kind.auto_hopper`: where it
    measured faster than the split kind the tuner times) runs that kind, as a call that leaves
    the kind to flashgen does."""
    if spec.direction == "fwd":
        from ..kernels import hopper
        from ..kernels.fwd import forward

        if hopper.choose(spec, q, k, v, q.shape[2], per_key=bool(spec.attn_mask)):
            extra = _mask_kwargs(spec, q, k)
            return lambda: forward(q, k, v, causal=spec.causal, scale=None, **extra)
    else:
        from ..kernels import bwd_kind

        if bwd_kind.auto_hopper(False, None, spec, k.shape[2], q.shape[1] // k.shape[1]):
            return launcher(spec, cfg, q, k, v, do, out, lse, kind="hopper")
    return launcher(spec, cfg, q, k, v, do, out, lse)


_TIMING_INPUTS: dict = {}


def timing_inputs(spec: KernelSpec, shape: Shape) -> tuple:
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
