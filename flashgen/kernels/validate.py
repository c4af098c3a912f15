"""Input checks for attention calls: everything the kernels do not support fails here, loudly.

The generated kernels trust their arguments (no bounds checks beyond the ragged edges), so any
input they cannot handle must be refused before launch with a `ValueError` that names the
argument and the rule. The torch.compile backend relies on the same function to decide which
subgraphs it may take over, so the rules here are exactly the kernels' capabilities.

Every eager attention call runs these checks, so a signature that passed once (shapes, strides,
dtypes, devices, causal, scale) is remembered and later calls with it cost one dict lookup. Only
plain tensors with a bool `causal` and a float or None `scale` are remembered: fake and
functional tensors under tracing (symbolic shapes) and anything unusual take the full checks.
"""

from __future__ import annotations

import math

import torch

from ..core.paths import interpret_mode
from ..core.spec import DTYPES, MAX_HEAD_DIM, MIN_HEAD_DIM, dtype_name
from .launch import keep

_passed: dict[tuple, float] = {}
_MAX_REMEMBERED = 4096


def input_signature(q, k, v, causal, scale) -> tuple | None:
    """Everything `check_inputs`' rules read, as the key of its verdict (and of
    `flashgen.runtime.vendor.launch_bound_key`); None where no key applies: under Dynamo
    (which traces the plain checks, not a global dict), inputs that are not plain tensors, a
    `causal` that is not a bool or a `scale` neither None nor a float (so 1 == True or
    1 == 1.0 cannot hit an entry made for another type)."""
    tensor = torch.Tensor
    if (
        not torch.compiler.is_compiling()
        and type(q) is tensor
        and type(k) is tensor
        and type(v) is tensor
        and (causal is True or causal is False)
        and (scale is None or type(scale) is float)
    ):
        return (
            q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(),
            q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, causal, scale,
        )  # fmt: skip
    return None


def check_inputs(q, k, v, *, causal, scale, signature=None) -> float:
    """Validate q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D]; return the softmax scale to use.

    `scale=None` means SDPA's default 1/sqrt(D). Raises ValueError naming the argument and the
    rule for anything the kernels do not support. `signature`: `input_signature` of these
    arguments where the caller has built it already (None: built here).
    """
    key = signature if signature is not None else input_signature(q, k, v, causal, scale)
    if key is not None:
        found = _passed.get(key)
        if found is None:
            found = _check(q, k, v, causal=causal, scale=scale)
            if len(_passed) >= _MAX_REMEMBERED:
                _passed.clear()
            _passed[key] = found
        return found
    return _check(q, k, v, causal=causal, scale=scale)


def _check(q, k, v, *, causal, scale) -> float:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(
                f"{name} must be 4-D [batch, heads, seq, head_dim], got {t.dim()}-D shape "
                f"{tuple(t.shape)}"
            )
        if dtype_name(t.dtype) not in DTYPES:
            raise ValueError(
                f"{name} must have dtype float16, bfloat16 or float32, got {dtype_name(t.dtype)}"
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            f"q, k and v must share one dtype, got q {dtype_name(q.dtype)}, "
            f"k {dtype_name(k.dtype)}, v {dtype_name(v.dtype)}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k and v must be on one device, got q on {q.device}, k on {k.device}, "
            f"v on {v.device}"
        )

    batch, hq, sq, dim = q.shape
    if not (k.shape[3] == dim and v.shape[3] == dim):
        raise ValueError(
            f"q, k and v must have the same head_dim (last dim), got q {dim}, k {k.shape[3]}, "
            f"v {v.shape[3]}"
        )
    if not MIN_HEAD_DIM <= dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, got {dim}")
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if k.shape[0] != batch:
        raise ValueError(f"k and v must have q's batch size {batch}, got {k.shape[0]}")
    hkv, sk = k.shape[1], k.shape[2]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(
            f"q heads ({hq}) must be a multiple of k/v heads ({hkv}) (grouped-query attention)"
        )
    if sq == 0:
        raise ValueError("q must have a sequence length of at least 1, got 0")
    if sk == 0:
        raise ValueError("k and v must have a sequence length of at least 1, got 0")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(3) != 1:
            raise ValueError(
                f"{name} must be contiguous in its last dim (stride 1), got stride {t.stride(3)}; "
                f"call .contiguous() first"
            )
    if not isinstance(causal, bool):
        raise ValueError(f"causal must be a bool, got {causal!r}")
    if scale is None:
        return 1.0 / math.sqrt(dim)
    return _positive_float("scale", scale)


def normalize_window(window, causal: bool) -> tuple[int, int] | None:
    """`window` as the kernels take it: (left, right), query i sees keys i - left <= j <= i +
    right; None for no window.

    One int w is Mistral's causal window, w keys ending at the query itself (i - w < j <= i): it
    needs causal=True. A pair (left, right) of ints >= 0 is a two-sided band; with causal=True
    the right side is 0 (the causal mask and the band both hold). Sizes past the sequence
    lengths simply cover everything.
    """
    if window is None:
        return None
    if isinstance(window, bool):
        raise ValueError(f"window must be an int, a pair (left, right) or None, got {window!r}")
    if isinstance(window, int):
        if not causal:
            raise ValueError(
                f"window={window}: one int is the causal window (query i sees keys i - window < "
                "j <= i) and needs causal=True; pass window=(left, right) for a two-sided band"
            )
        if window < 1:
            raise ValueError(
                f"window must be >= 1 (keys a query sees, itself included), got {window}"
            )
        return (window - 1, 0)
    if isinstance(window, (tuple, list)) and len(window) == 2:
        left, right = window
        for side, n in (("left", left), ("right", right)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                raise ValueError(f"window's {side} size must be an int >= 0, got {n!r}")
        return (left, 0 if causal else right)
    raise ValueError(f"window must be an int, a pair (left, right) or None, got {window!r}")


def check_softcap(softcap) -> float | None:
    """`softcap` as the kernels take it: None, or a positive finite float (Gemma-2 uses 50.0)."""
    return None if softcap is None else _positive_float("softcap", softcap)


def _positive_float(name: str, value) -> float:
    """`value` (an int or float, not a bool) as a positive finite float; ValueError naming
    `name` otherwise. The rule `scale` and `softcap` share."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a positive float or None, got {value!r}")
    value = float(value)
    # (comparisons, not math.isfinite: under torch.compile(dynamic=True) a float argument is a
    # symbolic float, which Dynamo compares, guarding on the outcome, but cannot pass to math)
    if not 0.0 < value < math.inf:  # (NaN fails it too)
        raise ValueError(f"{name} must be a positive finite float, got {value!r}")
    return value


def check_kernel_device(device) -> None:
    """flashgen's Triton kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter.

    Why check here: anything else fails deep inside Triton with "0 active drivers", which does
    not say what to do. Called where flashgen's own kernels are about to be chosen (an SDPA
    backend forced with `impl=` may still take CPU tensors), and by the compile backend, which
    then leaves the site to Inductor.
    """
    kind = getattr(device, "type", str(device))
    if kind == "cuda" or interpret_mode():
        return
    raise RuntimeError(
        f"flashgen's Triton kernels need CUDA tensors; got {kind} tensors and TRITON_INTERPRET "
        "is not set. Move q, k and v to a CUDA GPU, or, to run on the CPU (tests), set "
        "TRITON_INTERPRET=1 in the environment before triton is imported (Triton's interpreter: "
        "correct but slow)"
    )


def expand_mask(attn_mask, q, k):
    """`attn_mask` as the kernels take it: a [B, Hq, Sq, Sk] view (stride 0 along broadcast
    dims, nothing copied) of a boolean (True: visible) or floating (added to the scaled scores)
    tensor broadcastable to that shape, as SDPA's attn_mask; ValueError naming the argument
    for anything else (`check_mask`, through `mask_shape`)."""
    full = mask_shape(attn_mask, q, k)
    if attn_mask.dim() != 4:  # (a 4-D mask, HF's, expands as it is: one view fewer, ~1.2 µs)
        attn_mask = attn_mask.view((1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape))
    return attn_mask.expand(full)


def mask_shape(attn_mask, q, k) -> tuple:
    """The [B, Hq, Sq, Sk] shape `attn_mask` expands to, or ValueError naming it (`check_mask`).
    A tensor's checks are made once per signature (the mask's shape, dtype and device, q's and
    k's shapes and q's device: all they read): in an eager call the composite op checks the
    mask that the primitive op then expands, on every call of every masked layer."""
    if not isinstance(attn_mask, torch.Tensor):
        return check_mask(attn_mask, q, k)  # (raises, naming the type)
    key = (attn_mask.shape, attn_mask.dtype, attn_mask.device, q.shape, q.device, k.shape)
    try:
        full = _checked.get(key)
    except TypeError:  # symbolic sizes (the composite op traced with dynamic shapes): unkept
        return check_mask(attn_mask, q, k)
    if full is None:
        full = keep(_checked, key, check_mask(attn_mask, q, k))
    return full


# `mask_shape`'s checked signatures -> the shape the mask expands to (`launch.keep` bounds it).
_checked: dict = {}


def check_mask(attn_mask, q, k) -> tuple:
    """The checks behind `mask_shape` (which keeps their answer per signature), made every
    time: the [B, Hq, Sq, Sk] shape the mask expands to, or ValueError naming attn_mask."""
    if not isinstance(attn_mask, torch.Tensor):
        raise ValueError(f"attn_mask must be a tensor or None, got {type(attn_mask).__name__}")
    if not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):
        raise ValueError(
            f"attn_mask must be boolean (True: attend) or floating (added to the scores), got "
            f"{dtype_name(attn_mask.dtype)}"
        )
    if attn_mask.device != q.device:
        raise ValueError(f"attn_mask must be on q's device {q.device}, got {attn_mask.device}")
    batch, heads, seq_q = q.shape[:3]
    full = (batch, heads, seq_q, k.shape[2])
    if attn_mask.dim() > 4:
        raise ValueError(f"attn_mask must have at most 4 dims, got shape {tuple(attn_mask.shape)}")
    shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    if any(n not in (1, f) for n, f in zip(shape, full, strict=True)):
        raise ValueError(
            f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to [batch, heads, "
            f"seq_q, seq_k] = {list(full)}"
        )
    return full
