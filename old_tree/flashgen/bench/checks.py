"""The benchmarks' correctness check: a float64 reference computed in query-row chunks on the
first batch element and the first K/V head's query group, and the relative error of an
implementation's output and gradients against it, bounded per dtype (`TOLERANCE`). Used by
`flashgen.bench.harness.bench_case` for every timed row. `grad_check` is the whole-tensor
gradient check of the GPU scripts that call the backward launchers directly."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .harness import Case

# Relative error (max abs error over the reference's max abs value) an implementation may have.
# Half types: a few units in the last place of the output's largest values (bf16 has 8 bits of
# mantissa, fp16 11); the gradients sum over the whole sequence, so they get a looser bound.
TOLERANCE = {
    "bfloat16": {"out": 2e-2, "grad": 5e-2},
    "float16": {"out": 4e-3, "grad": 1e-2},
    "float32": {"out": 2e-4, "grad": 1e-3},
}


def reference(case: Case, inputs, *, backward: bool, chunk: int = 1024):
    """float64 (out, dq, dk, dv) on batch element 0 and K/V head 0 with its query heads.

    Computed in chunks of query rows (scores [group, chunk, seq] at a time), so a 16k-token
    case needs ~1 GB, not the full N x N matrix. dq/dk/dv are None without `backward`.
    """
    import torch

    group = case.hq // case.hkv
    q, k, v, do = (t[:1, :group].double() if t.shape[1] == case.hq else t[:1, :1].double()
                   for t in inputs)  # fmt: skip
    q, do = q[0], do[0]  # [group, seq, d]
    k, v = k[0, 0], v[0, 0]  # [seq, d]
    scale = 1.0 / math.sqrt(case.head_dim)
    n = case.seq
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=q.dtype, device=q.device)
    cols = torch.arange(n, device=q.device)

    def probs(start, stop):
        s = torch.matmul(q[:, start:stop], k.T) * scale
        if case.causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            s = s.masked_fill(cols[None, :] > rows, float("-inf"))
        m = torch.logsumexp(s, dim=-1)
        return torch.exp(s - m[..., None]), m

    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        p, lse[:, start:stop] = probs(start, stop)
        out[:, start:stop] = torch.matmul(p, v)
    if not backward:
        return out, None, None, None
    dq = torch.empty_like(q)
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    delta = (do * out).sum(-1)  # [group, seq]
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        p, _ = probs(start, stop)
        d_o = do[:, start:stop]
        dv += torch.einsum("gij,gid->jd", p, d_o)
        ds = p * (torch.matmul(d_o, v.T) - delta[:, start:stop, None])
        dq[:, start:stop] = torch.matmul(ds, k) * scale
        dk += torch.einsum("gij,gid->jd", ds, q[:, start:stop]) * scale
    return out, dq, dk, dv


def check(case: Case, got, ref) -> tuple[bool, dict]:
    """(ok, {name: relative error}) of an implementation's (out, dq, dk, dv) against `ref`."""
    group = case.hq // case.hkv
    errors = {}
    ok = True
    for name, g, r in zip(("out", "dq", "dk", "dv"), got, ref, strict=True):
        if g is None or r is None:
            continue
        g = g[0, :group] if name in ("out", "dq") else g[0, 0]
        g = g.double()
        size = r.abs().max().item() or 1.0
        err = (g - r).abs().max().item() / size
        if not math.isfinite(err):
            err = float("inf")
        errors[name] = err
        bound = TOLERANCE[case.dtype]["out" if name == "out" else "grad"]
        ok = ok and err <= bound
    return ok, errors


def grad_check(got, q, k, v, do, *, causal: bool) -> tuple[bool, dict]:
    """(ok, {name: [error, bound]}) of a backward's (dq, dk, dv) for `out = attention(q, k, v)`
    (None where not computed: skipped), against float64 autograd through
    `flashgen.kernels.reference.attention_ref` on the whole tensors: max abs error within 3x
    SDPA's own error in the inputs' dtype plus 8e-3 x max(1, max |ref|), and finite.

    Why SDPA's error as the yardstick rather than `TOLERANCE`: these checks run odd lengths and
    GQA shapes where the gradients' rounding depends on the shape; PyTorch's own kernel at the
    same dtype says what that rounding is. The scripts of benchmarks/ that time kernels and
    configs one by one (bwd_kinds.py, bwd_sweep.py, hopper_bwd.py) check with this.
    """
    import torch

    from ..kernels.reference import attention_ref, sdpa_same_dtype

    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*leaves, causal=causal)[0].backward(do.double())
    same = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*same, causal=causal).backward(do)
    ok, errors = True, {}
    for name, mine, ref, theirs in zip(("dq", "dk", "dv"), got, leaves, same, strict=True):
        if mine is None:
            continue
        err = (mine.double() - ref.grad).abs().max().item()
        bound = 3.0 * (theirs.grad.double() - ref.grad).abs().max().item()
        bound += 8e-3 * max(1.0, ref.grad.abs().max().item())
        errors[name] = [round(err, 5), round(bound, 5)]
        ok = ok and bool(torch.isfinite(mine).all()) and err <= bound
    return ok, errors
