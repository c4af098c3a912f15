"""Proving a mask causal for EVERY length the compiled graph accepts, not just the traced one.

Why not evaluate the mask at the traced length: a graph compiled with dynamic lengths (or
recompiled with symbolic lengths by Dynamo's automatic dynamic) is reused for every length in
its range. A sliding-window band evaluated at a length shorter than its window equals the causal
mask, and is not one at longer lengths; baking "causal" in gave wrong results (issue 11).

So the ops that build the mask are interpreted symbolically, as a function of the diagonal offset
d = key index - query index: fills (ones/zeros/full, `torch.tensor` of a number), tril/triu
offsets, comparisons of arange row and column indices, slices of buffers whose diagonals are
constant, casts, comparisons with constants (an arange against a constant only where it holds
for every element at every length: `idx >= c` with the arange's first value >= c) and boolean
logic. Such a mask is piecewise constant in d with integer breakpoints
(`mask_values.Diag`), so it can be checked for every d that the largest accepted length reaches: the upper
bound of the length in the graph's shape env (the length itself for static shapes; unbounded
for plain dynamic lengths). Any op not understood, an offset that is not a constant, a mask
modified in place, and a mask read from a forward() argument are refused: what is not proven
is never replaced.

A causal sliding-window band (query i keeps keys i - w < j <= i, w a constant) is recognised the
same way: its pattern keeps exactly -(w - 1) <= d <= 0 at every length, so it is the windowed
kernel's mask at every length the graph accepts (at lengths <= w it equals the causal mask, and so
does the windowed kernel). `prove_causal(..., allow_window=True)` returns w for such a band.

A two-sided band (query i keeps keys i - left <= j <= i + right, both constants, the diagonal
inside; or one side unbounded, e.g. `tril(2)`) is the windowed kernel's mask without causal:
`prove_band` returns (left, right) for it, and `prove_structure` tries the causal proof first,
then the band. Only for equal query and key lengths: the kernels count a window from the
top-left diagonal.

This module holds the proof; what it works on (values, op tables) is `mask_values`, the
symbolic interpreter `mask_interpreter`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import fx

from .core import NEAR_NEG_INF, Skip, example_value, known_eq
from .mask_interpreter import Interpreter
from .mask_values import Diag, Index, Offset, Values, expr

# ----------------------------------------------------------------------------- the proof


def diagonal_pattern(mask: Any, values: Values, shift: Any = None) -> Diag:
    """The mask as a function of d = key index - query index, valid for every length (or of
    d - shift, `Diag.bottom_right`, where it compares positions offset by shift = Sk - Sq)."""
    if not isinstance(mask, fx.Node):
        raise Skip("the mask is not a tensor computed in the graph")
    try:
        got = Interpreter(values, shift)(mask)
    except Skip:
        raise
    except Exception as e:  # an unexpected graph shape is "not proven", never a failed compile
        raise Skip(f"could not follow the mask ({type(e).__name__}: {e})") from e
    if isinstance(got, Index):
        raise Skip("the mask is an arange, not a comparison of row and column indices")
    if isinstance(got, Offset):
        raise Skip("the mask is a key - query offset, not a comparison of it with a constant")
    if not isinstance(got, Diag):
        raise Skip("the mask is not a tensor")
    return got


def _max_length(t: Any) -> float:
    """The largest value length t may take in this graph: t itself if static, else the upper
    bound its shape env proves (inf for an unbounded dynamic length)."""
    if isinstance(t, int):
        return t
    if isinstance(t, torch.SymInt):
        upper = t.node.shape_env.bound_sympy(t.node.expr).upper
        try:
            return math.inf if not upper.is_finite else int(upper)
        except (AttributeError, TypeError):
            return math.inf
    raise Skip("the sequence length is not an integer")


def _mask_kind(mask: Any) -> tuple[torch.Tensor, bool]:
    """(the mask's example value, whether it is additive: floating, not boolean); Skip for
    anything but a boolean or real floating tensor computed in the graph."""
    if not isinstance(mask, fx.Node):
        raise Skip("the mask is not a tensor computed in the graph")
    me = example_value(mask)
    if not isinstance(me, torch.Tensor) or me.is_complex():
        raise Skip("the mask is not a real tensor")
    additive = me.is_floating_point()
    if not additive and me.dtype != torch.bool:
        raise Skip(f"a {me.dtype} mask is neither boolean nor additive")
    return me, additive


def _kept(v: Any, *, keep: bool, additive: bool) -> bool | None:
    """Whether mask value v lets a score through (None: neither kept nor -inf)."""
    if additive:
        if v == 0:
            return True
        return False if v <= NEAR_NEG_INF else None
    return bool(v) if keep else not bool(v)


def prove_causal(
    mask: Any, values: Values, tq: Any, tk: Any, *, keep: bool, allow_window: bool = False
) -> int | None:
    """`prove_causal_aligned` for sites that take the top-left alignment only."""
    return prove_causal_aligned(mask, values, tq, tk, keep=keep, allow_window=allow_window)[0]


def prove_causal_aligned(
    mask: Any,
    values: Values,
    tq: Any,
    tk: Any,
    *,
    keep: bool,
    allow_window: bool = False,
    allow_bottom_right: bool = False,
) -> tuple[int | None, str]:
    """Raise Skip (with the reason) unless `mask` is the top-left causal mask for every query
    and key length the graph may be called with. Returns None for the causal mask and, with
    `allow_window`, w for a causal sliding-window band (d = j - i kept iff -(w - 1) <= d <= 0
    for every length); without it a band is refused as not causal.

    The two lengths must be provably equal (a slice causal at one pair, e.g.
    `tril(ones(tk, tk))[-tq:]`, may not be at another); the mask's pattern in d = j - i must
    keep exactly d <= 0 for every |d| below the largest accepted length. `tq`, `tk`: the
    (possibly symbolic) lengths; `keep`: for boolean masks, True where they mark kept
    positions (SDPA) and False where they mark masked ones (masked_fill, MultiheadAttention);
    float masks are additive (0 kept, -inf masked).

    Returns (window, alignment). With `allow_bottom_right`, lengths that may differ are
    accepted when the mask compares query positions arange(Sq) + (Sk - Sq) + c with key
    positions (what a KV cache's mask does: HF's `cache_position`, built inside the graph from
    the cache length): the pattern is then counted from the bottom-right diagonal, proven for
    every (Sq, Sk) the graph accepts, and the alignment is "bottom_right" (a causal window
    then ends at that diagonal: a KV cache under a sliding window)."""
    equal = known_eq(tq, tk)
    if isinstance(mask, fx.Node) and not equal and not allow_bottom_right:
        raise Skip("query and key lengths may differ")
    me, additive = _mask_kind(mask)
    differ = "query and key lengths may differ (a mask for lengths that may differ is proven"
    differ += (
        " only as a KV cache's bottom-right causal mask: query positions arange(Sq) + Sk - Sq)"
    )
    try:
        pattern = diagonal_pattern(mask, values, None if equal else expr(tk) - expr(tq))
    except Skip as e:
        if equal:
            raise
        raise Skip(f"{differ}: {e}") from e
    if not equal and not pattern.bottom_right and isinstance(tq, int) and isinstance(tk, int):
        # static lengths: a top-left pattern f(d) is f(d' + Sk - Sq) from the bottom-right
        pattern = dataclasses.replace(pattern.shifted(tk - tq), bottom_right=True)
    if not equal and not pattern.bottom_right:
        raise Skip(f"{differ}; this one is not")
    if pattern.cuts and not (
        me.dim() >= 2 and known_eq(me.shape[-2], tq) and known_eq(me.shape[-1], tk)
    ):
        raise Skip("the mask's last two dims are not [query length, key length]")
    # |d| (top-left) or |d - (Sk - Sq)| (bottom-right) stays below the longer length.
    reach = (_max_length(tq) if equal else max(_max_length(tq), _max_length(tk))) - 1
    cuts = sorted({*pattern.cuts, 1})  # 1: where causal changes from kept to masked
    split = Diag(tuple(cuts), tuple(pattern.at(r) for r in [cuts[0] - 1, *cuts]))
    window = _band_start(split, reach, keep=keep, additive=additive) if allow_window else None
    for lo, hi, v in split.regions():
        lo, hi = max(lo, -reach), min(hi, reach)
        if lo > hi:
            continue
        kept = _kept(v, keep=keep, additive=additive)
        if window is not None and hi < window:
            kept = not kept  # below the band: masked is what a window wants
        if kept is not (hi <= 0):
            d = int(hi if hi <= 0 else lo)
            does = (
                f"has value {v!r} (neither kept nor -inf) at"
                if kept is None
                else ("keeps" if kept else "masks")
            )
            longest = "any length" if math.isinf(reach) else f"lengths up to {int(reach) + 1}"
            raise Skip(
                f"the mask is not causal: it {does} key - query offset {d}, for a length this "
                f"graph accepts ({longest})"
            )
    align = "bottom_right" if pattern.bottom_right else "top_left"
    return (None if window is None else 1 - window), align


#: a band side the mask leaves open at every length (`prove_band`): as a window size it covers
#: every key, the launch clamping it to the lengths (`flashgen.kernels.plans.clamp_window`)
UNBOUNDED = 2**30


def prove_structure(
    mask: Any, values: Values, tq: Any, tk: Any, *, keep: bool, allow_bottom_right: bool = True
) -> tuple[bool, int | tuple[int, int] | None, str]:
    """(causal, window, alignment) of a mask proven for every length the graph accepts: the
    causal mask (True, None, alignment) or a causal band (True, w, "top_left") by
    `prove_causal_aligned`, else a two-sided band by `prove_band` (False, (left, right),
    "top_left"; (False, None, "top_left") for a mask that keeps every key). Skip with the causal
    proof's reason when neither holds."""
    try:
        window, align = prove_causal_aligned(
            mask, values, tq, tk, keep=keep, allow_window=True,
            allow_bottom_right=allow_bottom_right,
        )  # fmt: skip
        return True, window, align
    except Skip as e:
        causal_reason = e
    try:
        band = prove_band(mask, values, tq, tk, keep=keep)
    except Skip:
        raise causal_reason from None
    return False, band, "top_left"


def prove_band(
    mask: Any, values: Values, tq: Any, tk: Any, *, keep: bool
) -> tuple[int, int] | None:
    """(left, right) when `mask` keeps exactly the keys i - left <= j <= i + right of every
    query i, at every length the graph accepts (equal query and key lengths), the diagonal
    included (left, right >= 0: no row is left without a key, so a finite fill is as exact as
    -inf); a side the mask never closes is UNBOUNDED; None for a mask that keeps every key.
    Skip otherwise (`keep` and the mask kinds as in `prove_causal_aligned`)."""
    me, additive = _mask_kind(mask)
    pattern = diagonal_pattern(mask, values)
    if not known_eq(tq, tk):
        # A mask that keeps every key whatever the offset is no band at any alignment (HF's
        # bidirectional part of a cross-attention's padding mask).
        if not pattern.cuts and _kept(pattern.vals[0], keep=keep, additive=additive) is True:
            return None
        raise Skip("query and key lengths may differ (a two-sided band is proven for equal ones)")
    if pattern.cuts and not (
        me.dim() >= 2 and known_eq(me.shape[-2], tq) and known_eq(me.shape[-1], tk)
    ):
        raise Skip("the mask's last two dims are not [query length, key length]")
    reach = _max_length(tq) - 1
    regions = []
    for lo, hi, v in pattern.regions():
        lo, hi = max(lo, -reach), min(hi, reach)
        if lo > hi:
            continue
        kept = _kept(v, keep=keep, additive=additive)
        if kept is None:
            raise Skip(
                f"the mask has value {v!r} (neither kept nor -inf) at key - query offset {int(lo)}"
            )
        regions.append((lo, hi, kept))
    inside = [n for n, (_, _, kept) in enumerate(regions) if kept]
    if not inside or inside != list(range(inside[0], inside[-1] + 1)):
        raise Skip("the mask is not a band: the key - query offsets it keeps are not one run")
    lo, hi = regions[inside[0]][0], regions[inside[-1]][1]
    if not lo <= 0 <= hi:
        raise Skip("the band leaves out the diagonal (a query row may see no key)")
    left = UNBOUNDED if lo <= -reach else int(-lo)
    right = UNBOUNDED if hi >= reach else int(hi)
    return None if left == right == UNBOUNDED else (left, right)


def _band_start(split: Diag, reach: float, *, keep: bool, additive: bool) -> int | None:
    """The lowest kept offset L > -reach of a pattern that masks every d < L and keeps every
    L <= d <= 0 (a causal band of width 1 - L); None when there is no such L (plain causal, or
    not a band: `prove_causal` then checks and explains). Region edges are integers."""
    below: list[tuple[float, float, Any]] = [
        (max(lo, -reach), min(hi, 0), v) for lo, hi, v in split.regions() if lo <= 0
    ]
    below = [(lo, hi, v) for lo, hi, v in below if lo <= hi]
    kept = [_kept(v, keep=keep, additive=additive) for _, _, v in below]
    if not kept or kept[-1] is not True or kept[0] is not False:
        return None
    first = kept.index(True)
    if not all(k is True for k in kept[first:]) or not all(k is False for k in kept[:first]):
        return None
    start = below[first][0]
    return int(start) if math.isfinite(start) else None
