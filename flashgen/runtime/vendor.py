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

One mix is exact and is made: cuDNN's backward on flashgen's forward. cuDNN keeps the same
per-row statistic as flashgen (the natural log of the softmax denominator of the scaled scores),
so its backward op (`aten._scaled_dot_product_cudnn_attention_backward`) can take flashgen's out
and logsumexp: on the H200 its gradients equal those of cuDNN's own forward + backward to the
last digit of the float64 check (benchmarks/RESULTS.md, session 11 B2). Where the records name
flashgen's forward and cuDNN's backward (the usual case on the H200: flashgen's forward is the
faster one at most shapes, cuDNN's backward at all), a training call runs exactly that
(`route` answers MIX: `hybrid_backward`; the composite op passes that to the autograd function
through `MIXED_BACKWARD`, whose backward calls `cudnn_backward`). Not for a deterministic backward (flashgen's split kind
is bit-reproducible) nor for a call forced to one implementation.

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

import contextvars
import functools

import torch
import torch.nn.functional as F

from ..core.impls import FLASHGEN, check_impl, sdpa_backend
from ..core.spec import dtype_name, shape_bucket, spec_for
from ..kernels import decode
from ..kernels.launch import capturing as _capturing
from ..kernels.tma import env_reader
from .dispatch import (
    MAX_SETTLED,
    default_choice,
    forced,
    impl_choice,
    remember_impl,
    settled_impls,
)
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
    # bool(): with symbolic head counts (a graph compiled with dynamic=True whose q, k are its
    # inputs) the comparison is a SymBool, which SDPA's enable_gqa refuses; bool() guards on it.
    gqa = bool(q.shape[1] != k.shape[1])
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


# The last item of the `settled_impls` keys of `winner(..., in_training=True)`: the forward
# of a call with a backward, whose choice takes that call's host margin.
MIX_FORWARD = "mix_forward"


def winner(q, k, v, causal: bool, backward: bool | None = None, in_training: bool = False) -> str:
    """The implementation `route` would pick for these inputs (records, defaults, forcing).
    `backward`: whether a gradient is wanted (None: `needs_backward` asks); it picks the
    backward's record. `in_training` (with backward False): the forward's record for a call
    that has a backward too, the mix's forward (`hybrid_backward`), so the host rule takes
    the margin of such calls (`host_margin_s(True)`)."""
    seq_q, seq_k = _hint(q.shape[2]), _hint(k.shape[2])
    if seq_q is None or seq_k is None:  # an unbacked size: nothing to look up
        return FLASHGEN
    if backward is None:
        backward = needs_backward(q, k, v)
    batch, heads, head_dim = _hint(q.shape[0]), _hint(q.shape[1]), _hint(q.shape[3])
    key = (batch, heads, seq_q, seq_k, head_dim, causal, q.dtype, backward, q.is_cuda)
    if in_training and not backward:
        key += (MIX_FORWARD,)  # its own answer under the host rule, kept apart
    found = settled_impls.get(key)
    if found is not None:
        return found
    spec = spec_for(head_dim, causal, dtype_name(q.dtype), "bwd" if backward else "fwd")
    # no database query inside a CUDA graph capture (a miss then takes the defaults)
    impl = remember_impl(key, spec, seq_q, seq_k, q.is_cuda, query_db=lambda: not _capturing(q))
    if impl != FLASHGEN or not q.is_cuda or None in (batch, heads, head_dim):
        return impl
    # cached by remember_impl's ask, except a capture-time default: then not the database
    choice = impl_choice(spec, seq_q, seq_k, True, query_db=lambda: not _capturing(q))
    work = (batch, heads, seq_q, seq_k, head_dim)
    vendor = host_rule(choice, spec, work, causal, backward, host_margin_s(backward or in_training))
    if vendor is None:
        return impl
    if key in settled_impls:
        settled_impls[key] = vendor
    return vendor


def host_rule(
    choice: tuple, spec, work: tuple, causal: bool, backward: bool, margin: float
) -> str | None:
    """The SDPA backend to run instead of flashgen's kernel when a record's `choice` (impl,
    ratio, source; see `flashgen.runtime.dispatch.impl_choice`) names flashgen but a CUDA call
    of `work` (batch, query heads, query rows, key rows, head dim) would save less GPU time
    than `margin` seconds (`host_margin_s`); None to keep the choice (also for a forced one or
    one without a comparison, and where the defaults name flashgen themselves)."""
    impl, ratio, source = choice
    if impl != FLASHGEN or source == "forced" or ratio is None:
        return None
    if gain_s(work, causal, backward, ratio) >= margin:
        return None
    vendor = default_choice(spec, True)
    return None if vendor == FLASHGEN else vendor


# A record's winner is flashgen's kernel when it beat every SDPA backend by FLASHGEN_MARGIN at
# the bucket's timing shape; a call only gains that margin of its own GPU time, and flashgen's
# op costs more host time than an SDPA backend's (a Python op and launcher against ATen's C++
# path). On the H200 the Llama block (4 x 16 heads x 2048, head dim 64, causal) ran its
# compiled forward slower than Inductor's in 6 of 7 paired rounds (0.96x paired, 0.81x by
# medians) when the op took flashgen's forward by its 1.06x record, where the kernel could save
# ~3 µs; with this rule it ran 1.03x over 41 rounds (benchmarks/RESULTS.md, session 10 B3, B5).
# So flashgen's kernel runs only where its expected saving is at least the order of the op's
# extra host time; elsewhere the GPU's default SDPA backend does. That extra time is now much
# smaller without a backward than with one: on the H200 (session 32 B3, `host_time.py`) the
# op's forward with flashgen's kernel cost 18.7 µs of host time against SDPA's 18.9 and its
# forward+backward 179.5 against 131.6 (48 µs more). So a call with a backward keeps the 50 µs
# margin (HOST_MARGIN_BWD_S) and a forward alone takes 10 µs (HOST_MARGIN_FWD_S): with 50 µs for
# both, forward calls of 1k-4k sequences whose records name flashgen by 1.06-1.15x ran cuDNN
# (the op level with it, 0.997-0.999x) where flashgen's kernel, forced, ran 1.02-1.08x faster
# than cuDNN's, do_bench and back-to-back alike (session 36 B4, B5). The Llama block's forward
# (~3 µs expected saving) stays under either margin.
HOST_MARGIN_FWD_S = 10e-6
HOST_MARGIN_BWD_S = 50e-6


def host_margin_s(backward: bool) -> float:
    """The least expected saving (seconds) for which a call runs flashgen's kernel on its
    record: HOST_MARGIN_BWD_S when a backward follows, HOST_MARGIN_FWD_S for a forward alone."""
    return HOST_MARGIN_BWD_S if backward else HOST_MARGIN_FWD_S


# The GPU time a call is expected to take is its FLOPs at this rate: above what attention
# reaches on the H200 (600-690 TFLOP/s at head dim 128), so the estimate errs short and the
# rule toward the vendor kernel (never slower than PyTorch).
ATTENTION_FLOPS_PER_S = 700e12


def gain_s(work: tuple, causal: bool, backward: bool, ratio: float) -> float:
    """The GPU seconds flashgen's kernel is expected to save on one call of `work` (batch, query
    heads, query rows, key rows, head dim) when it is `ratio` times as fast as the runner-up:
    the call's time estimated from its FLOPs (half under a causal mask; a backward adds ~2.5x
    the forward's), times 1 - 1/ratio."""
    batch, heads, seq_q, seq_k, head_dim = work
    flops = 4.0 * batch * heads * seq_q * seq_k * head_dim
    flops *= (0.5 if causal else 1.0) * (3.5 if backward else 1.0)
    return flops / ATTENTION_FLOPS_PER_S * (1.0 - 1.0 / ratio)


def route(
    q, k, v, causal: bool, scale: float, impl: str | None = None, window=None, softcap=None,
    backward: bool | None = None,
):  # fmt: skip
    """SDPA's output when an SDPA backend runs this call, None when flashgen's kernels should,
    MIX when flashgen's forward should run with cuDNN's backward on it (`hybrid_backward`).

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
        # The kernels' speeds cannot matter here, the host path can: flashgen's forward alone
        # where its path costs what SDPA's does, else PyTorch's own choice without switching
        # backends (see `launch_bound`, `launch_bound_flashgen`).
        if launch_bound_flashgen(q, k, needs_backward(q, k, v) if backward is None else backward):
            return None
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
        )
    if (
        impl is None
        and chosen == HYBRID_BACKEND
        and hybrid_backward(q, k, v, causal, backward, chosen)
        and not (_refused and _refusal_key(MIX_REFUSAL, q, k, causal) in _refused)
    ):
        return MIX  # flashgen's forward, cuDNN's backward on it (module docstring)
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
# `settled_impls` remembers launch-bound signatures under `launch_bound_key`s (their first item
# LAUNCH_BOUND_SDPA; emptied with the run-time choice's caches), the value saying where `route`
# sent them: LAUNCH_BOUND_SDPA (SDPA's own choice) or LAUNCH_BOUND_FLASHGEN (flashgen's forward,
# `launch_bound_flashgen`).
LAUNCH_BOUND_SDPA = "sdpa_launch_bound"
LAUNCH_BOUND_FLASHGEN = "flashgen_launch_bound"


def launch_bound_key(signature: tuple | None, q, k, v) -> tuple | None:
    """The key in `settled_impls` of a plain eager auto call (impl None) whose inputs have
    `signature` (`flashgen.kernels.validate.input_signature`: everything `check_inputs` reads,
    with the given scale), with whether a gradient is wanted (what `winner` reads besides).
    None where no key applies (no signature, inputs `check_inputs` will refuse for their
    rank) or the call is not launch-bound on a GPU."""
    if signature is None or len(signature[0]) != 4 or len(signature[1]) != 4:
        return None
    if not launch_bound(q, k):
        return None
    return (LAUNCH_BOUND_SDPA, signature, needs_backward(q, k, v))


def remember_launch_bound(key: tuple | None, q, what: str = LAUNCH_BOUND_SDPA) -> None:
    """After `route` answered an auto call of `launch_bound_key` `key` (the branch of `route`
    for launch-bound plain eager calls): remember what it ran, LAUNCH_BOUND_SDPA (SDPA's own
    choice) or LAUNCH_BOUND_FLASHGEN (flashgen's forward), so the next such call skips the
    choice (host time: on the H200 the auto forward of 1x1x128x128 and 1x1x128x64 calls cost
    1.40 and 1.51x SDPA's before, 1.26 and 1.28x after; benchmarks/RESULTS.md, session 18 B2
    and B5). Nothing where the call is not plain eager."""
    if key is None or not plain_eager(q):
        return
    if len(settled_impls) >= MAX_SETTLED:
        settled_impls.clear()
    settled_impls[key] = what


def launch_bound_flashgen(q, k, backward: bool) -> bool:
    """Whether a launch-bound plain eager auto call (`launch_bound`) runs flashgen's forward
    rather than SDPA's own choice: a forward alone (no backward follows), not a query short
    enough for the decode kernels (`flashgen.kernels.decode.applies`: their split launches
    have their own host cost), and no implementation forced for the process
    (`dispatch.forced`: FLASHGEN_IMPL or `set_impl` naming an SDPA backend keeps SDPA).

    Why: there the call's cost is its host path, and flashgen's plain forward path costs what
    SDPA's does, while reaching SDPA through this op adds the op's own checks to SDPA's path.
    On the H200, 1x1x128x64 bf16 (`benchmarks/host_time.py`, session 57): the forward forced
    to flashgen 28.85-30.36 µs against SDPA called directly 29.04-30.39, the auto forward
    (records naming flashgen, the host rule then SDPA's own choice) 38.68-40.12 (1.26-1.30x).
    On the other hosts measured (sessions 22-46, H100 and H200) forced forwards read 0.94-1.10x
    SDPA's (seven of nine 0.95-1.00x), auto forwards 1.05-1.39x. With a backward the SDPA path
    stays: flashgen's forward+backward host time is 1.22-1.29x SDPA's (session 57)."""
    return not backward and forced() is None and not decode.applies(q, k)


def launch_bound(q, k) -> bool:
    """Whether an eager CUDA call is so small that its host time is all that counts: at most
    LAUNCH_BOUND_WORK multiply-adds per QK^T (1x16x512x512x64; its forward is about 1 GFLOP,
    a few microseconds of an H200, less than any call's host time). There the record's SDPA
    backend is not forced: on the H200 a 1x1x128x64 bf16 forward through cuDNN (the defaults'
    choice) cost 30.0 µs of host time against 19.2 µs for SDPA's own choice, and the
    implementation choice rests on timings of 1k-16k sequences (benchmarks/RESULTS.md, host
    time, session 7); a forward alone runs flashgen's forward (`launch_bound_flashgen`). Not
    applied while tracing (a graph keeps its choice for every length)."""
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


# The SDPA backend whose backward can run on flashgen's forward (module docstring).
HYBRID_BACKEND = "sdpa_cudnn"
# MIX_ENV=0: never mix (the backward's winner runs the whole call, as before the mix).
MIX_ENV = "FLASHGEN_VENDOR_BACKWARD"
_mix_env = env_reader(MIX_ENV)
# The refusals cache's name for cuDNN's backward refusing flashgen's forward (`refuse_mix`).
MIX_REFUSAL = "sdpa_cudnn_backward_on_flashgen"
# `route`'s answer for a call that runs flashgen's forward and cuDNN's backward on it.
MIX = object()
# Set by the composite op around the autograd function it applies for a MIX call, read by
# `flashgen.runtime.autograd._Attention.forward` (which keeps it for its backward).
MIXED_BACKWARD: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "flashgen_mixed_backward", default=False
)


def hybrid_backward(
    q, k, v, causal: bool, backward: bool | None = None, bwd_winner: str | None = None
) -> bool:
    """Whether this call (no window, softcap, mask, lengths, dropout or ALiBi; top-left causal:
    `route` is not asked otherwise) should run flashgen's forward and cuDNN's backward on it: a
    gradient is wanted, the records (and defaults, host rule) name cuDNN for the backward and
    flashgen for the forward, a CUDA 16-bit input, the backward op exists, torch's
    deterministic mode is off and FLASHGEN_VENDOR_BACKWARD is not "0". (A call asking for a
    deterministic backward itself gets flashgen's: `_Attention.forward`.) `bwd_winner`: the
    backward's `winner`, when the caller has it."""
    if backward is None:
        backward = needs_backward(q, k, v)
    if not backward or not q.is_cuda or q.dtype not in (torch.float16, torch.bfloat16):
        return False
    if torch.are_deterministic_algorithms_enabled() or not _has_cudnn_backward():
        return False
    if not mix_enabled():
        return False
    if (bwd_winner or winner(q, k, v, causal, True)) != HYBRID_BACKEND:
        return False
    # The forward's record under a training call's host margin: a forward+backward through
    # the mix cost 444 µs of host time against 272 for SDPA's own on the H200 (session 36
    # B10), while below that margin the mix gained 0.8-2.2% of GPU time at the grid rows
    # measured (B9), which a host-bound step would not see. Whether a smaller margin pays
    # in models was not measured, so the mix keeps the larger one.
    return winner(q, k, v, causal, False, in_training=True) == FLASHGEN


def mix_enabled() -> bool:
    """Whether FLASHGEN_VENDOR_BACKWARD leaves the mix on (anything but "0")."""
    return _mix_env() not in ("0", b"0")


def refuse_mix(q, k, causal: bool) -> None:
    """Remember that cuDNN's backward refused flashgen's forward for inputs like these (the
    autograd function then ran flashgen's backward), so that `route` stops answering MIX for
    them, as it stops asking a backend that refused its forward (`clear_refusals` forgets)."""
    _refused.add(_refusal_key(MIX_REFUSAL, q, k, causal))


@functools.cache
def _has_cudnn_backward() -> bool:
    return hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention_backward")


def cudnn_backward(do, q, k, v, out, lse, causal: bool, scale: float):
    """(dq, dk, dv) of flashgen's forward (out, lse: float32 [B, H, Sq], natural log) by cuDNN's
    SDPA backward. dO takes out's layout (flashgen's out follows q's dimension order,
    `flashgen.kernels.layout`; a gradient in another layout is copied into out's)."""
    if do.stride() != out.stride():
        do = torch.empty_like(out).copy_(do)
    return torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        do, q, k, v, out, lse.unsqueeze(-1), None, None, None, None, None, q.shape[2],
        k.shape[2], 0.0, causal, scale=scale,
    )  # fmt: skip
