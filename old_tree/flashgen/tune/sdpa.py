"""PyTorch's SDPA backends as candidates: checked on a task's check case against the same
float64 reference and tolerances as flashgen's configs (`flashgen.tune.bench`), timed on the
same inputs, and the winner picked (`pick_impl`) for the record's `impl`."""

from __future__ import annotations

import math

from ..core.spec import KernelSpec
from ..hardware.costmodel import Shape
from .bench import GRAD_TOL, Outcome, check_case, error_text, normalised_err, timing_inputs


def sdpa_launcher(spec: KernelSpec, impl: str, q, k, v, do=None):
    """A no-argument callable that runs SDPA backend `impl` once on the same inputs a flashgen
    candidate gets: the forward, or (direction "bwd") the backward alone, through autograd on a
    graph built once (what SDPA's backward costs inside a training step)."""
    from ..runtime.vendor import sdpa

    scale = 1.0 / math.sqrt(spec.head_dim)
    if spec.direction == "fwd":
        return lambda: sdpa(q, k, v, causal=spec.causal, scale=scale, impl=impl)
    import torch

    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    out = sdpa(*leaves, causal=spec.causal, scale=scale, impl=impl)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


def check_sdpa(spec: KernelSpec, impl: str, shape: Shape, device: str, *, seed: int = 0) -> Outcome:
    """SDPA backend `impl` on the check case, against the same float64 reference and with the
    same tolerances as flashgen's candidates. A backend that refuses the case is "failed"."""
    try:
        return _check_sdpa(spec, impl, shape, device, seed)
    except Exception as exc:  # a refusing backend (RuntimeError) is an outcome, not a crash
        return Outcome("failed", error=error_text(exc))


def _check_sdpa(spec: KernelSpec, impl: str, shape: Shape, device: str, seed: int) -> Outcome:
    import torch

    case = check_case(spec, shape, device, seed)
    q, k, v, do = case["q"], case["k"], case["v"], case["do"]
    if spec.direction == "fwd":
        out = sdpa_launcher(spec, impl, q, k, v)()
        err = (out.double() - case["ref_out"]).abs()
        if not bool(torch.isfinite(out).all()) or bool((err > case["bound"]).any()):
            return Outcome(
                "wrong", error=f"out: max error {err.max().item():.3g} > atol {case['atol']:.3g}"
            )
        return Outcome("ok", time_ms=0.0)
    grads = sdpa_launcher(spec, impl, q, k, v, do)()
    tol = GRAD_TOL[spec.dtype]
    for name, ours, ref in zip(("dq", "dk", "dv"), grads, case["ref_grads"], strict=True):
        err = normalised_err(ours, ref)
        if not bool(torch.isfinite(ours).all()) or not err <= tol:
            return Outcome("wrong", error=f"{name}: normalised max error {err:.3g} > {tol}")
    return Outcome("ok", time_ms=0.0)


def sdpa_time_ms(
    spec: KernelSpec, impl: str, shape: Shape, *, warmup: int = 25, rep: int = 100
) -> float:
    """Median milliseconds of SDPA backend `impl` on the timing inputs (L2 flushed), as
    `time_ms` does for a flashgen config."""
    import triton.testing

    q, k, v, do, _out, _lse = timing_inputs(spec, shape)
    fn = sdpa_launcher(spec, impl, q, k, v, do)
    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def pick_impl(times: dict[str, float]) -> tuple[str | None, float | None]:
    """The winner of `times` (implementation -> ms; inf = did not run) and its ratio to the
    runner-up: (None, None) when nothing ran, ratio None when only one ran. Ties go to the
    implementation listed first in `flashgen.core.impls.IMPLS` (flashgen's own)."""
    from ..core.impls import IMPLS

    ran = sorted(
        (ms, IMPLS.index(name), name)
        for name, ms in times.items()
        if name in IMPLS and math.isfinite(ms) and ms > 0
    )
    if not ran:
        return None, None
    if len(ran) == 1:
        return ran[0][2], None
    return ran[0][2], ran[1][0] / ran[0][0]
