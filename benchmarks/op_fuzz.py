"""Random calls of `flashgen.attention` with its arguments combined, forward and gradients against
a float64 reference written from the documented semantics (a correctness sweep, not a timing).

Why: each argument has its own tests, but the op sends a call down one of many paths by what
it combines (the plain launcher, a masked call's route, the aligned plan of a bottom-right
diagonal, the decode kernels of a short query, the key range of a padding mask, the sinks'
rescaling, values of another head dim padded, the composite op under torch.compile), and a
combination no test names can take a path none checks. Each case draws shapes (odd lengths,
GQA, short queries, queries over 100-400 keys, head dims, values of another head dim; q/k/v
contiguous, as [B, S, H, D] views, row-padded or slices of a fused QKV tensor), then any of:
causal (top-left or bottom-right), a window (one int or a pair), softcap, ALiBi slopes ([H] or
[B, H]), an attn_mask (boolean or additive, broadcast shapes, -inf or finfo.min entries, a
learned bias), key/query lengths (either side), dropout (its reference mask from the seed the
call drew: `flashgen.kernels.dropout.keep_mask`, `aligned.keep_mask` for bottom-right calls),
sinks (learned or not), an explicit scale, `deterministic`, which of q/k/v want a gradient, a
forced implementation (an SDPA backend that declines the call refuses it naming impl), and
calls eager or compiled (`torch.compile(fullgraph=True)`, without dropout); then the same call
again with other values (new sizes half the time, new lengths and masks: the caches the first
call filled, a compiled graph's dynamic sizes). One case in eight is a packed call
(`flashgen.attention_varlen`: sequences of 0-40 queries and keys, rows of no sequence, causal,
window, softcap), checked sequence by sequence. One case in ten adds an argument the op
documents as refused (attn_mask beside lengths, sinks beside dropout, ...): that call must
raise ValueError naming the argument, nothing else.

The reference (`reference`) is SDPA's semantics plus the op's documented extras: softcap on
the scaled scores, then ALiBi slope * (j - i) at positions local to the valid ranges, then the
mask; causal and windows counted from each valid range's start (bottom-right: from the
diagonal i + Sk - Sq); a row that sees no key gives zeros; sinks join each row's
denominator; dropout keeps the drawn entries, scaled by 1 / (1 - p); a row whose every
visible score lies below about -45,426 (`HIDDEN`: an additive finfo.min under each, "no
hiding", as in SDPA) gets the softmax of those scores, its values' mean where the bias absorbs
them, but no gradient, as the op documents (eager SDPA would pass one to q and k there; only a
loss reading such a row sees it); beside sinks that softmax is zeros (the sink's logit
outweighs the bias). Not drawn: such fills beside dropout.

A case that fails prints its seed and arguments; `--seed S --cases 1` runs it alone.

Usage: python benchmarks/op_fuzz.py [--cases N] [--seed S] [--device cuda]
       [--dtype bfloat16|float16] [--no-compile]
(default: the CPU in Triton's interpreter, float32, a fraction of a second a case; on a GPU
float32 keeps the CPU's tolerance, bfloat16/float16 reach the Hopper family with a looser one;
float16 runs on the CPU too.)
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import sys
import time
import traceback

# A case passes when every compared tensor's largest error is at most ATOL + RTOL times its
# largest reference entry, by input dtype: float32 kernels against float64 (CPU interpreter or
# GPU; inputs are O(1), so ATOL bounds the rounding of a gradient that is zero in exact
# arithmetic, as the keys' of a row that sees one key), then 16-bit inputs (~1e-2 relative).
TOL = {"float32": (1e-4, 2e-4), "bfloat16": (4e-2, 4e-2), "float16": (1e-2, 1e-2)}

# The op's line below which a row's largest score (scaled, after softcap, ALiBi and an additive
# mask) counts as hidden by a huge finite bias: -65536 in log2 units (its lse could not hold
# log(l) beside it); finfo.min of float32, bfloat16 and float16 all fall below it.
HIDDEN = -65536.0 * math.log(2.0)

# Words a refusal's message must hold (one of): the argument it is about.
ARGUMENTS = (
    "attn_mask", "key_lengths", "query_lengths", "dropout_p", "sinks", "window", "softcap",
    "causal_align", "alibi_slopes", "padding", "causal", "impl",
)  # fmt: skip


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="cpu: Triton's interpreter (default); cuda: the compiled kernels on the GPU",
    )  # fmt: skip
    parser.add_argument(
        "--dtype", choices=tuple(TOL), default="float32",
        help="the inputs' dtype (default float32; bfloat16 needs --device cuda)",
    )  # fmt: skip
    parser.add_argument(
        "--no-compile", action="store_true",
        help="run the cases drawn as compiled ones eagerly (Inductor's compiles are slow on a "
        "GPU: seconds a case)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases must be at least 1, got {args.cases}")
    if args.device == "cpu" and args.dtype == "bfloat16":
        parser.error("--dtype bfloat16 runs on --device cuda only (the interpreter's numpy has "
                     "no bfloat16)")  # fmt: skip
    return args


def draw(rng: random.Random) -> dict:
    """One case's arguments (plain Python values; `build` makes the tensors)."""
    c = {"batch": rng.randint(1, 3), "hkv": rng.choice([1, 1, 2]), "group": rng.choice([1, 2, 3])}
    c["d"] = rng.choice([16, 32, 40, 64])
    c["dv"] = c["d"] if rng.random() < 0.85 else rng.choice([16, 24, 48])
    short = rng.random() < 0.25
    c["sq"] = rng.randint(1, 16) if short else rng.randint(2, 70)
    c["sk"] = c["sq"] if rng.random() < 0.3 else rng.randint(1, 90)
    if short and rng.random() < 0.3:  # a decoding step over a longer cache: split over keys
        c["sk"] = rng.randint(100, 400)
    c["causal"] = rng.random() < 0.5
    c["align"] = "bottom_right" if c["causal"] and rng.random() < 0.35 else "top_left"
    c["window"] = None
    if rng.random() < 0.25:
        if c["causal"] and rng.random() < 0.5:
            c["window"] = rng.randint(1, 40)
        else:
            c["window"] = (rng.randint(0, 30), rng.randint(0, 30))
    c["softcap"] = round(rng.uniform(2.0, 30.0), 2) if rng.random() < 0.2 else None
    c["alibi"] = rng.choice(["heads", "batch"]) if rng.random() < 0.15 else None
    c["dropout"] = rng.choice([0.1, 0.3, 0.5]) if rng.random() < 0.2 else 0.0
    c["mask"] = None
    c["lengths"] = None
    if rng.random() < 0.3:
        # bias: additive and learned; fill: additive with finfo.min where add has -inf
        kinds = ["bool", "add", "bias"] + ([] if c["dropout"] else ["fill"])
        kind = rng.choice(kinds)
        dims = [rng.choice([1, c["batch"]]), rng.choice([1, c["hkv"] * c["group"]])]
        dims += [rng.choice([1, c["sq"]]), c["sk"]]
        c["mask"] = (kind, tuple(dims), rng.choice([0.0, 0.2, 0.6]))
    elif c["align"] == "top_left" and rng.random() < 0.3:
        side = rng.choice(["right", "left"])
        keys = [rng.randint(0, c["sk"]) for _ in range(c["batch"])]
        rows = None
        if (c["causal"] and side == "left") or rng.random() < 0.5:
            rows = [rng.randint(0, c["sq"]) for _ in range(c["batch"])]
        c["lengths"] = (side, keys, rows, rng.random() < 0.5)  # last: as a tensor
    c["sinks"] = None
    if not c["dropout"] and rng.random() < 0.12:
        c["sinks"] = rng.random() < 0.5  # requires grad
    c["scale"] = round(rng.uniform(0.05, 0.5), 3) if rng.random() < 0.2 else None
    c["deterministic"] = rng.choice([None, None, True, False])
    c["grad"] = rng.random() < 0.85
    # bshd: HF's [B, S, H, D] projections seen as [B, H, S, D]; padded: rows of a wider
    # tensor (a row stride past D); qkv: one of three slices of a fused [B, S, 3, H, D]
    c["layout"] = rng.choice(["bhsd", "bhsd", "bshd", "padded", "qkv"])
    c["compile"] = not c["dropout"] and rng.random() < 0.15
    c["varlen"] = None
    if rng.random() < 0.12:
        # `attention_varlen`: sequences packed one after another (query, key lengths), then
        # query rows of no sequence; it takes causal (top-left), window, softcap, scale, GQA
        n = rng.randint(1, 4)
        lq = [rng.randint(0, 40) for _ in range(n)]
        lk = list(lq) if rng.random() < 0.6 else [rng.randint(0, 40) for _ in range(n)]
        c["varlen"] = (lq, lk, rng.choice([0, 0, 3]), rng.random() < 0.5)  # last: max given
        c.update(align="top_left", alibi=None, mask=None, lengths=None, dropout=0.0, sinks=None)
        c["dv"] = c["d"]
    c["refused"] = None
    if not c["varlen"] and rng.random() < 0.1:
        c["refused"] = rng.choice(
            ["mask_lengths", "sinks_dropout", "window_int", "softcap", "dropout_p", "align",
             "alibi_grad", "padding"]
        )  # fmt: skip
    # which of q, k, v want a gradient (a frozen encoder's keys and values: only q)
    c["needs"] = rng.choice(["qkv", "qkv", "qkv", "q", "kv", "v", "qk"])
    # the implementation forced (an SDPA backend may decline the input, which is then refused
    # naming impl; with an extra it is always refused)
    c["impl"] = rng.choice([None] * 12 + ["flashgen", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"])
    if c["compile"] and c["impl"] != "flashgen":
        # (a refusal while Dynamo traces with fullgraph=True is Dynamo's error, not the op's)
        c["impl"] = None
    return c


def _lengths_tensor(values, torch):
    return torch.tensor(values, dtype=torch.int32)


def build(c: dict, seed: int, device: str, dtype, torch):
    """(q, k, v, kwargs) for `flashgen.attention` from a draw, and the leaves to differentiate
    (name -> tensor)."""
    gen = torch.Generator().manual_seed(seed)
    hq = c["hkv"] * c["group"]

    def tensor(b, h, s, d):
        if c["layout"] == "bshd":
            return torch.randn(b, s, h, d, generator=gen).to(device, dtype).transpose(1, 2)
        if c["layout"] == "padded":
            return torch.randn(b, h, s, d + 8, generator=gen).to(device, dtype)[..., :d]
        if c["layout"] == "qkv":
            fused = torch.randn(b, s, 3, h, d, generator=gen).to(device, dtype)
            return fused[:, :, 1].transpose(1, 2)
        return torch.randn(b, h, s, d, generator=gen).to(device, dtype)

    q = tensor(c["batch"], hq, c["sq"], c["d"])
    k = tensor(c["batch"], c["hkv"], c["sk"], c["d"])
    v = tensor(c["batch"], c["hkv"], c["sk"], c["dv"])
    leaves = {}
    if c["grad"]:  # (a detached view keeps its strides)
        q, k, v = (
            t.detach().requires_grad_(n in c["needs"])
            for n, t in zip("qkv", (q, k, v), strict=True)
        )
        leaves.update((n, t) for n, t in zip("qkv", (q, k, v), strict=True) if n in c["needs"])
    kw = {"causal": c["causal"], "causal_align": c["align"], "scale": c["scale"]}
    if c["impl"]:
        kw["impl"] = c["impl"]
    kw["window"], kw["softcap"], kw["deterministic"] = c["window"], c["softcap"], c["deterministic"]
    if c["alibi"]:
        from flashgen.kernels.alibi import standard_slopes

        slopes = standard_slopes(hq)
        if c["alibi"] == "batch":
            slopes = slopes[None, :] * (1.0 + torch.rand(c["batch"], 1, generator=gen))
        kw["alibi_slopes"] = slopes.to(device)
    if c["mask"]:
        kind, dims, hide = c["mask"]
        if kind == "bool":
            mask = torch.rand(dims, generator=gen) >= hide
        else:
            fill = torch.finfo(dtype).min if kind == "fill" else float("-inf")
            mask = torch.randn(dims, generator=gen) * 2.0
            mask = mask.masked_fill(torch.rand(dims, generator=gen) < hide, fill)
        mask = mask.to(device) if kind == "bool" else mask.to(device, dtype)
        if kind == "bias" and c["grad"]:
            mask.requires_grad_()
            leaves["attn_mask"] = mask
        kw["attn_mask"] = mask
    if c["lengths"]:
        side, keys, rows, as_tensor = c["lengths"]
        kw["padding"] = side
        kw["key_lengths"] = _lengths_tensor(keys, torch).to(device) if as_tensor else keys
        if rows is not None:
            kw["query_lengths"] = _lengths_tensor(rows, torch).to(device) if as_tensor else rows
    if c["dropout"]:
        kw["dropout_p"] = c["dropout"]
    if c["sinks"] is not None:
        sinks = (torch.randn(hq, generator=gen) * 2.0).to(device, torch.float32)
        if c["sinks"] and c["grad"]:
            sinks.requires_grad_()
            leaves["sinks"] = sinks
        kw["sinks"] = sinks
    return q, k, v, kw, leaves


def _refuse(c: dict, kw: dict, q, torch) -> str:
    """Add to `kw` one argument the op documents as refused for this call; the word its
    ValueError must name."""
    what = c["refused"]
    if what == "mask_lengths":
        kw["key_lengths"] = [1] * q.shape[0]
        kw["attn_mask"] = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=q.device)
        return "key_lengths"
    if what == "sinks_dropout":
        kw["dropout_p"] = 0.1
        kw["sinks"] = torch.zeros(q.shape[1], device=q.device)
        return "sinks"
    if what == "window_int":
        kw["causal"], kw["causal_align"], kw["window"] = False, "top_left", 4
        return "window"
    if what == "softcap":
        kw["softcap"] = -1.0
        return "softcap"
    if what == "dropout_p":
        kw["dropout_p"] = 1.0
        return "dropout_p"
    if what == "align":
        kw["causal"], kw["causal_align"], kw["window"] = False, "bottom_right", None
        return "causal_align"
    if what == "alibi_grad":
        kw["alibi_slopes"] = torch.ones(q.shape[1], device=q.device, requires_grad=True)
        return "alibi_slopes"
    kw["padding"] = "middle"
    return "padding"


def _ranges(c: dict, kw: dict, torch):
    """Per batch entry (q_start, q_len, k_start, k_len) as [B, 1, 1, 1] int64 tensors."""
    b, sq, sk = c["batch"], c["sq"], c["sk"]
    keys = kw.get("key_lengths")
    rows = kw.get("query_lengths")
    keys = [sk] * b if keys is None else [int(n) for n in keys]
    rows = [sq] * b if rows is None else [int(n) for n in rows]
    keys = [min(max(n, 0), sk) for n in keys]
    rows = [min(max(n, 0), sq) for n in rows]
    left = kw.get("padding") == "left"
    qs = [sq - n if left else 0 for n in rows]
    ks = [sk - n if left else 0 for n in keys]

    def t(x):
        return torch.tensor(x, dtype=torch.int64).view(b, 1, 1, 1)

    return t(qs), t(rows), t(ks), t(keys)


def reference(q, k, v, c: dict, kw: dict, keep, torch):
    """float64 attention with the op's documented semantics (module docstring); q, k, v (and
    the mask and sinks in kw) are float64 tensors on the CPU."""
    hq, hkv = q.shape[1], k.shape[1]
    k, v = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
    sq, sk = q.shape[2], k.shape[2]
    scale = kw["scale"] if kw["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    s = (q @ k.transpose(-1, -2)) * scale
    if kw["softcap"] is not None:
        s = kw["softcap"] * torch.tanh(s / kw["softcap"])
    qs, ql, ks, kl = _ranges(c, kw, torch)
    i = torch.arange(sq).view(1, 1, sq, 1) - qs  # positions local to the valid ranges
    j = torch.arange(sk).view(1, 1, 1, sk) - ks
    visible = (i >= 0) & (i < ql) & (j >= 0) & (j < kl)
    off = sk - sq if kw["causal_align"] == "bottom_right" else 0
    if kw["causal"]:
        visible = visible & (j <= i + off)
    win = kw["window"]
    if win is not None:
        left, right = (win - 1, 0) if isinstance(win, int) else win
        if kw["causal"]:
            right = 0
        visible = visible & (j >= i + off - left) & (j <= i + off + right)
    slopes = kw.get("alibi_slopes")
    if slopes is not None:
        sl = slopes.double().cpu()
        sl = sl.view(1, -1, 1, 1) if sl.dim() == 1 else sl.view(sl.shape[0], -1, 1, 1)
        s = s + sl * (j - i)
    mask = kw.get("attn_mask")
    if mask is not None and mask.dtype == torch.bool:
        visible = visible & mask.cpu()
    elif mask is not None:
        s = s + mask
        visible = visible & ~torch.isneginf(mask)
    visible = visible.expand(s.shape)
    s = s.masked_fill(~visible, float("-inf"))
    m = s.amax(-1, keepdim=True)
    sinks = kw.get("sinks")
    if sinks is not None:
        m = torch.maximum(m, sinks.view(1, -1, 1, 1))
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m)).detach()
    e = torch.exp(s - m).masked_fill(~visible, 0.0)
    den = e.sum(-1, keepdim=True)
    if sinks is not None:
        seen = visible.any(-1, keepdim=True)
        den = den + torch.where(seen, torch.exp(sinks.view(1, -1, 1, 1) - m), 0.0)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    if keep is not None:
        p = p * keep.cpu() / (1.0 - kw["dropout_p"])
    out = p @ v
    # documented: a row whose every visible score lies below HIDDEN (a huge finite bias under
    # each: finfo.min) gets the softmax above, the values' mean where the bias absorbs the
    # scores, but no gradient (beside a sink, whose logit the bias leaves alone, that softmax
    # is zeros)
    seen = visible.any(-1, keepdim=True)
    top = s.masked_fill(~visible, float("-inf")).amax(-1, keepdim=True)
    hidden = seen & (top < HIDDEN)
    if sinks is None and bool(hidden.any()):
        out = torch.where(hidden, out.detach(), out)
    return out


def _keep(c: dict, kw: dict, seed: int, device: str, torch):
    """The dropout mask the call drew with `seed`, at the call's positions (drawn by the
    kernels' own draw on the call's device: off the interpreter only a GPU runs it), on the
    CPU."""
    from flashgen.kernels import aligned, dropout

    b, hq, sq, sk = c["batch"], c["hkv"] * c["group"], c["sq"], c["sk"]
    p = kw["dropout_p"]
    if kw["causal_align"] == "bottom_right":
        win = kw["window"]
        left = None if win is None else (win - 1 if isinstance(win, int) else win[0])
        return aligned.keep_mask(seed, p, b, hq, sq, sk, device, left=left).cpu()
    starts = None
    if c["lengths"]:
        starts = [int(x) for x in _ranges(c, kw, torch)[2].flatten()]
    return dropout.keep_mask(seed, p, b, hq, sq, sk, device, key_starts=starts).cpu()


def _error(got, want, tol) -> float:
    """Largest |got - want| over what the tolerance (ATOL, RTOL) allows: a case passes at <= 1."""
    got = got.detach().double().cpu()
    if got.isnan().any():
        return float("inf")
    atol, rtol = tol
    return (got - want).abs().max().item() / (atol + rtol * want.abs().max().item())


def describe(c: dict) -> str:
    keys = ("batch", "hkv", "group", "sq", "sk", "d", "dv", "causal", "align", "window",
            "softcap", "alibi", "mask", "lengths", "dropout", "sinks", "scale", "layout",
            "grad", "needs", "impl", "compile", "refused", "varlen")  # fmt: skip
    # (sinks False: present, not learned; a falsy value elsewhere: not drawn)
    shown = [n for n in keys if c[n] not in (None, False, 0.0) or n in ("sq", "sinks")]
    return " ".join(f"{n}={c[n]!r}" for n in shown if c[n] is not None)


def vary(c: dict, rng: random.Random) -> dict:
    """The same case at new sizes, half the time (the same query/key relation: equal, short),
    with new lengths of the same kind: the call a model makes next, through the caches the
    first call filled (routes, key ranges, plans by signature) and, compiled, the same graph."""
    c = dict(c)
    if rng.random() < 0.5:
        sq, sk = c["sq"], c["sk"]
        c["sq"] = rng.randint(1, 16) if sq <= 16 else rng.randint(17, 70)
        c["sk"] = c["sq"] if sk == sq else rng.randint(1, 400 if sk > 90 else 90)
        if c["mask"]:
            kind, dims, hide = c["mask"]
            dims = (*dims[:2], c["sq"] if dims[2] != 1 else 1, c["sk"])
            c["mask"] = (kind, dims, hide)
    if c["lengths"]:
        side, keys, rows, as_tensor = c["lengths"]
        keys = [rng.randint(0, c["sk"]) for _ in keys]
        rows = None if rows is None else [rng.randint(0, c["sq"]) for _ in rows]
        c["lengths"] = (side, keys, rows, as_tensor)
    return c


def _check(fn, c: dict, data_seed: int, device: str, dtype_name: str) -> dict:
    """Run `fn` (flashgen.attention, compiled or not) on case `c` with inputs drawn from
    `data_seed`, and its gradients; {tensor name: its error over the tolerance} against the
    float64 reference."""
    import torch

    from flashgen.kernels import dropout

    q, k, v, kw, leaves = build(c, data_seed, device, getattr(torch, dtype_name), torch)
    torch.manual_seed(data_seed)
    try:
        out = fn(q, k, v, **kw)
    except ValueError as e:
        if c["impl"] in (None, "flashgen") or "impl=" not in str(e):
            raise
        return {"declined": str(e)}  # an SDPA backend forced that does not take this call
    keep = None
    if c["dropout"]:
        torch.manual_seed(data_seed)
        keep = _keep(c, kw, int(dropout.new_seed().item()), device, torch)
    ref_leaves = {n: t.detach().double().cpu().requires_grad_() for n, t in leaves.items()}
    qd, kd, vd = (
        ref_leaves.get(n, t.detach().double().cpu()) for n, t in zip("qkv", (q, k, v), strict=True)
    )
    rkw = dict(kw)
    for name in ("attn_mask", "sinks"):
        if name in kw and kw[name].is_floating_point():
            rkw[name] = ref_leaves.get(name, kw[name].detach().double().cpu())
    want = reference(qd, kd, vd, c, rkw, keep, torch)
    return _errors(out, want, leaves, ref_leaves, data_seed + 1, dtype_name)


def _errors(out, want, leaves: dict, ref_leaves: dict, grad_seed: int, dtype_name: str) -> dict:
    """{"out" and "d" + each leaf's name: its error over the tolerance}: the output against the
    reference's, and, where there are leaves, their gradients for one random cotangent (a
    reference leaf no output reaches, or a reference that reaches none: zeros)."""
    import torch

    assert tuple(out.shape) == tuple(want.shape), (out.shape, want.shape)
    pairs = {"out": (out, want.detach())}
    if leaves:
        gen = torch.Generator().manual_seed(grad_seed)
        g = torch.randn(want.shape, generator=gen).double()
        got = torch.autograd.grad(out, list(leaves.values()), g.to(out.device, out.dtype))
        exp = (  # (a packed call whose every sequence lacks queries or keys: no path at all)
            torch.autograd.grad(want, list(ref_leaves.values()), g, allow_unused=True)
            if want.requires_grad
            else [None] * len(ref_leaves)
        )
        for name, a, b, t in zip(leaves, got, exp, ref_leaves.values(), strict=True):
            pairs["d" + name] = (a, torch.zeros_like(t) if b is None else b)
    return {name: _error(a, b, TOL[dtype_name]) for name, (a, b) in pairs.items()}


def _verdict(errors: dict, shown: str) -> str:
    """The case's summary line; AssertionError when an error is over its tolerance."""
    worst = max(errors, key=errors.get)
    summary = f"worst {worst} {errors[worst]:.3f} of the tolerance  [{shown}]"
    assert errors[worst] <= 1.0, f"{worst} off by {errors[worst]:.3f}x the tolerance: {summary}"
    return summary


def _varlen_case(c: dict, seed: int, device: str, dtype_name: str, rng) -> str:
    """A packed call (`flashgen.attention_varlen`), eager or compiled (the maximum lengths
    given then), against `reference` run on each sequence alone; rows of no sequence give
    zeros."""
    import torch

    import flashgen

    lq, lk, extra, give_max = c["varlen"]
    hq, d = c["hkv"] * c["group"], c["d"]
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, dtype_name)
    q = torch.randn(sum(lq) + extra, hq, d, generator=gen).to(device, dtype)
    k = torch.randn(sum(lk), c["hkv"], d, generator=gen).to(device, dtype)
    v = torch.randn(sum(lk), c["hkv"], d, generator=gen).to(device, dtype)
    if c["grad"]:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    cu_q, cu_k = (torch.tensor([0, *itertools.accumulate(n)], dtype=torch.int32) for n in (lq, lk))
    cu_q, cu_k = cu_q.to(device), cu_k.to(device)
    kw = {
        "causal": c["causal"],
        "scale": c["scale"],
        "window": c["window"],
        "softcap": c["softcap"],
    }
    fn = flashgen.attention_varlen
    maxes = (max(lq), max(lk)) if give_max or c["compile"] else (None, None)
    if not (q.shape[0] and k.shape[0]):  # no query row or no key at all: refused, naming it
        try:
            fn(q, k, v, cu_q, cu_k, *maxes, **kw)
        except ValueError as e:
            assert "sequence length of at least 1" in str(e), str(e)
            return f"refused (empty): {str(e)[:60]}  [varlen {describe(c)}]"
        raise AssertionError(f"an empty packed call was not refused  [varlen {describe(c)}]")
    if c["compile"]:
        torch._dynamo.reset()
        fn = torch.compile(fn, fullgraph=True, dynamic=rng.random() < 0.5)
    out = fn(q, k, v, cu_q, cu_k, *maxes, **kw)
    leaves = [t.detach().double().cpu().requires_grad_(c["grad"]) for t in (q, k, v)]
    parts, at_q, at_k = [], 0, 0
    rkw = {**kw, "causal_align": "top_left"}
    for nq, nk in zip(lq, lk, strict=True):
        sub = {"batch": 1, "sq": nq, "sk": nk, "lengths": None}
        qs, ks, vs = (
            t[a : a + n].transpose(0, 1)[None]
            for t, a, n in zip(leaves, (at_q, at_k, at_k), (nq, nk, nk), strict=True)
        )
        if nq and nk:
            parts.append(reference(qs, ks, vs, sub, rkw, None, torch)[0].transpose(0, 1))
        else:
            parts.append(torch.zeros(nq, hq, d, dtype=torch.float64))
        at_q, at_k = at_q + nq, at_k + nk
    want = torch.cat([*parts, torch.zeros(extra, hq, d, dtype=torch.float64)])
    grads = dict(zip("qkv", (q, k, v), strict=True)) if c["grad"] else {}
    refs = dict(zip("qkv", leaves, strict=True)) if c["grad"] else {}
    errors = _errors(out, want, grads, refs, seed + 1, dtype_name)
    return _verdict(errors, f"varlen {describe(c)}")


def run_case(
    seed: int, device: str = "cpu", dtype_name: str = "float32", compiled: bool = True
) -> str:
    """Draw and check one case (`compiled` False: a case drawn compiled runs eagerly), then
    the same call again with other values (`vary`); raises AssertionError on a mismatch.
    Returns a summary."""
    import torch

    import flashgen

    rng = random.Random(seed)
    c = draw(rng)
    c["compile"] = c["compile"] and compiled
    if c["refused"]:
        q, k, v, kw, _ = build(c, seed, device, getattr(torch, dtype_name), torch)
        word = _refuse(c, kw, q, torch)
        try:
            flashgen.attention(q, k, v, **kw)
        except ValueError as e:
            assert any(a in str(e) for a in ARGUMENTS), f"refusal names no argument: {e}"
            assert word in str(e), (word, str(e))
            return f"refused ({word}): {str(e)[:70]}  [{describe(c)}]"
        raise AssertionError(f"{c['refused']}: the call was not refused  [{describe(c)}]")
    if c["varlen"]:
        return _varlen_case(c, seed, device, dtype_name, rng)
    fn = flashgen.attention
    if c["compile"]:
        torch._dynamo.reset()
        fn = torch.compile(flashgen.attention, fullgraph=True, dynamic=rng.random() < 0.5)
    errors = _check(fn, c, seed, device, dtype_name)
    if "declined" in errors:
        return f"declined ({c['impl']}): {errors['declined'][:70]}  [{describe(c)}]"
    again = vary(c, rng)
    second = _check(fn, again, seed + 7919, device, dtype_name)
    if "declined" not in second:  # (the backend may decline other sizes)
        errors.update((f"{n} (again)", e) for n, e in second.items())
    shown = describe(c) + ("" if again == c else f"; again sq={again['sq']} sk={again['sk']}")
    return _verdict(errors, shown)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import torch

    torch.set_num_threads(1)
    failed, refused = [], 0
    start = time.time()
    for n, seed in enumerate(range(args.seed, args.seed + args.cases), 1):
        try:
            line = f"ok {run_case(seed, args.device, args.dtype, not args.no_compile)}"
            refused += line.startswith("ok refused")
        except Exception:
            failed.append(seed)
            line = "FAILED\n" + traceback.format_exc()
        print(f"[{n}/{args.cases}] seed {seed} {line} ({time.time() - start:.0f} s)", flush=True)
    print(f"{args.cases - len(failed)} passed ({refused} of them refusals), {len(failed)} failed"
          f"{': ' if failed else ''}{' '.join(map(str, failed))}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
