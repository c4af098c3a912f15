"""Run an attention call on one of PyTorch's SDPA backends when that is the faster implementation.

`flashgen.ops.attention` asks `route` first; None means "run flashgen's kernels". The choice is
per (spec, shape bucket) (`flashgen.runtime.dispatch.choose_impl`), and it is made for the whole call,
forward and backward together, because the two cannot be mixed: SDPA's backward needs what its
own forward saved (cuDNN's statistics, flash's RNG state), not flashgen's logsumexp, and the
reverse. So when a backward will run (grad enabled and an input requires grad) the choice is
the BACKWARD record's winner (`direction="bwd"`): the backward costs 2-3x the forward, so its
winner is the winner of forward+backward unless the forward's margin is larger than the
backward's, which the benchmark grid never showed. Without a backward, the forward record's
winner. Either way the whole autograd of that call goes through the chosen implementation
(`F.scaled_dot_product_attention` under `sdpa_kernel([backend])` is differentiable by itself).

Acceptance is checked by trying: a backend that refuses the input raises before it launches
anything, and then flashgen runs; the refusal is remembered per (impl, spec, bucket, GQA), so
it costs one exception, not one per call. A backend forced by the caller (`impl=` names it)
that refuses raises ValueError instead.

Under `torch.compile` the choice happens where the graph is built: Dynamo records the
`flashgen::attention` op, whose decomposition (AOTAutograd, fake tensors) calls `route` with the
traced sizes' hints, so the graph holds either flashgen's custom ops or SDPA's own backend op
and no guard on the length is added (a dynamic graph keeps the choice made for its first
length's bucket).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ..core.impls import FLASHGEN, check_impl, sdpa_backend
from ..core.spec import dtype_name, shape_bucket, spec_for
from ..kernels.launch import capturing as _capturing
from .dispatch import remember_impl, settled_impls
from .eager import plain_eager

_refused: set[tuple] = set()


def sdpa(q, k, v, *, causal: bool, scale: float, impl: str):
    """`F.scaled_dot_product_attention` on exactly the backend `impl` names (RuntimeError when
    that backend does not accept the input). GQA through SDPA's `enable_gqa`.

    The backend is chosen by setting SDPA's global backend flags around the call, as
    `torch.nn.attention.sdpa_kernel([backend])` does, but through the flag functions
    themselves (`_only_backend`): the context manager's Python (a generator, backend lists and
    enum look-ups, twice) measured about 15 µs per call on the CPU against under 1 µs, and this
    is the path every default call on a GPU whose defaults name an SDPA backend takes."""
    gqa = q.shape[1] != k.shape[1]
    switches = _switches()
    if switches is None or torch.compiler.is_compiling():
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel([sdpa_backend(impl)]):
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
            )
    gets, sets = switches
    before = [get() for get in gets]
    for put, on in zip(sets, _only_backend(impl), strict=True):
        put(on)
    try:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa
        )
    finally:
        for put, on in zip(sets, before, strict=True):
            put(on)


@functools.cache
def _switches():
    """(getters, setters) of every SDPA backend flag `sdpa_kernel` sets, in one order, or
    None when this torch lacks one of them (then `sdpa_kernel` itself is used)."""
    try:
        from torch.nn import attention

        names = tuple(attention._backend_names)
        gets = tuple(getattr(torch._C, f"_get_{name}_sdp_enabled") for name in names)
        sets = tuple(getattr(torch._C, f"_set_sdp_use_{name}") for name in names)
    except (AttributeError, ImportError, TypeError):
        return None
    return gets, sets


@functools.cache
def _only_backend(impl: str) -> tuple[bool, ...]:
    """The flag values, in `_switches`' order, that enable `impl`'s backend and no other."""
    from torch.nn import attention

    wanted = sdpa_backend(impl)
    return tuple(
        getattr(attention.SDPBackend, member) == wanted
        for member in attention._backend_names.values()
    )


def _hint(n) -> int | None:
    """A size as a plain int without adding a guard (a traced SymInt gives its example value)."""
    if isinstance(n, int):
        return n
    return getattr(getattr(n, "node", None), "hint", None)


def needs_backward(q, k, v) -> bool:
    return torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


def winner(q, k, v, causal: bool, backward: bool | None = None) -> str:
    """The implementation `route` would pick for these inputs (records, defaults, forcing).
    `backward`: whether a gradient is wanted (None: `needs_backward` asks)."""
    seq_q, seq_k = _hint(q.shape[2]), _hint(k.shape[2])
    if seq_q is None or seq_k is None:  # an unbacked size: nothing to look up
        return FLASHGEN
    if backward is None:
        backward = needs_backward(q, k, v)
    head_dim = _hint(q.shape[3])
    key = (seq_q, seq_k, head_dim, causal, q.dtype, backward, q.is_cuda)
    found = settled_impls.get(key)
    if found is not None:
        return found
    spec = spec_for(head_dim, causal, dtype_name(q.dtype), "bwd" if backward else "fwd")
    # no database query inside a CUDA graph capture (a miss then takes the defaults)
    return remember_impl(key, spec, seq_q, seq_k, q.is_cuda, query_db=lambda: not _capturing(q))


def route(
    q, k, v, causal: bool, scale: float, impl: str | None = None, window=None, softcap=None,
    backward: bool | None = None,
):  # fmt: skip
    """SDPA's output when an SDPA backend runs this call, None when flashgen's kernels should.

    `impl` None: the run-time choice (`winner`); a name forces that implementation (validated).
    Inputs must have passed `flashgen.kernels.validate.check_inputs`. A sliding `window` always
    stays with flashgen (SDPA has no window; its attn_mask would be the N x N mask windows avoid),
    and so does a logit `softcap` (SDPA has none). `backward` as in `winner` (the caller
    that has asked already passes its answer).
    """
    if window is not None or softcap is not None:
        if impl is not None and check_impl(impl) != FLASHGEN:
            what = "sliding window" if window is not None else "logit softcapping"
            raise ValueError(
                f"impl={impl!r}: PyTorch's SDPA has no {what}; use impl='flashgen' or None"
            )
        return None
    if impl is None:
        if torch.compiler.is_dynamo_compiling():
            # Decide when AOTAutograd decomposes the op (see the module docstring).
            return torch.ops.flashgen.attention(q, k, v, causal, scale)
        chosen = winner(q, k, v, causal, backward)
    else:
        chosen = check_impl(impl)
    if chosen == FLASHGEN:
        return None
    if impl is None and plain_eager(q) and launch_bound(q, k):
        # The kernels' speeds cannot matter here, the host path can: PyTorch's own choice,
        # without switching backends (see `launch_bound`).
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
    if impl is None and _refused and _refusal_key(chosen, q, k, causal) in _refused:
        return None
    try:
        return sdpa(q, k, v, causal=causal, scale=scale, impl=chosen)
    except RuntimeError as exc:
        if impl is not None:
            raise ValueError(
                f"impl={impl!r}: PyTorch's SDPA backend does not accept this input: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc
        _refused.add(_refusal_key(chosen, q, k, causal))
        return None


# Multiply-adds of one QK^T (B * Hq * Sq * Sk * D) at or below which a CUDA call is launch-bound.
LAUNCH_BOUND_WORK = 1 << 28


def launch_bound(q, k) -> bool:
    """Whether an eager CUDA call is so small that its host time is all that counts: at most
    LAUNCH_BOUND_WORK multiply-adds per QK^T (1x16x512x512x64; its forward is about 1 GFLOP,
    a few microseconds of an H200, less than any call's host time). There the record's SDPA
    backend is not forced: on the H200 a 1x1x128x64 bf16 forward through cuDNN (the defaults'
    choice) cost 30.0 µs of host time against 19.2 µs for SDPA's own choice, and the
    implementation choice rests on timings of 1k-16k sequences (benchmarks/RESULTS.md, host
    time, session 7). Not applied while tracing (a graph keeps its choice for every length)."""
    if not q.is_cuda:
        return False
    batch, heads, seq_q, dim = q.shape
    return batch * heads * seq_q * k.shape[2] * dim <= LAUNCH_BOUND_WORK


def _refusal_key(impl: str, q, k, causal: bool) -> tuple:
    """What a backend's acceptance depends on, as far as the refusals cache tells cases apart
    (built only when there is a refusal to look up or to remember: not on the hot path)."""
    bucket = shape_bucket(_hint(q.shape[2]) or 1, _hint(k.shape[2]) or 1)
    gqa = _hint(q.shape[1]) != _hint(k.shape[1])
    return (impl, dtype_name(q.dtype), _hint(q.shape[3]), causal, bucket, gqa, q.device.type)


def clear_refusals() -> None:
    """Forget which backends refused which inputs (tests; a changed torch setting)."""
    _refused.clear()
