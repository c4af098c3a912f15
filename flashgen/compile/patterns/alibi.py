"""Proving that an additive bias on the scores is ALiBi, so the kernels compute it from the
positions (`flashgen.attention(alibi_slopes=)`) instead of reading an N x N tensor.

ALiBi is slope_h * (j - i) for query i and key j. Models spell it as `slopes * (j - i)`,
`-slopes * (i - j)`, or BLOOM's `slopes * j` (the bias is constant down the rows), which
differs from slope * (j - i) by slope * i, a constant per row: the softmax of every row is the
same, and what replaces the site is softmax(scores) @ v, never the logsumexp. So a bias is
ALiBi when it equals c * slopes * j + (anything that does not depend on j) for a constant c,
with `slopes` a tensor that varies only along the batch and head dims.

The proof walks the nodes that build the bias with abstract values: `_Lin` (an affine
function of tensor indices, from `arange`: sum over axes of coef * index, plus a constant it
never needs to know) and `_Scaled` (a slopes tensor times a `_Lin`). Axes are counted from the
end, as broadcasting aligns them; a `_Scaled` may lose or gain leading unit dims and be sliced
along its last two (position) axes only, as MPT slices a bias built for its longest length to
the last keys: a slice start shifts the positions by a constant. HF BLOOM builds its bias as
`(slopes[:, None, None] * arange(T)).repeat(B, 1, 1)`, [B * H, 1, T], for scores it flattened
to [B * H, T, T] (`baddbmm`) and views as [B, H, T, T] afterwards: a `_Scaled` of per-head
slopes [H, 1, 1] repeated along its first axis only is "tiled", accepted only by a caller that
proves the flattened axis is B x H with this H (`prove_alibi(heads=H)`): row b * H + h of the
tiled bias has slope h. Every rule holds for every
length (the constants and row terms may be symbolic, a slice start too; only the key
coefficient must be a number), so the rewrite is exact at every shape the compiled graph
accepts. The kernels compute the bias in float32: a bias rounded to 16 bits before the add is
left to the attn_mask tensor path, which adds exactly what the graph computed (HF Falcon's
ALiBi, `slopes.bfloat16() * positions`, is). Anything else raises Skip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from .core import Skip, example_value, known_eq, same_length
from .mask_values import check_not_mutated, op_name

_EXACT = (torch.float32, torch.float64)  # dtypes in which the bias is what the kernels add


@dataclass(frozen=True)
class _Lin:
    """sum of coef * index along each axis (counted from the end) + an unknown constant."""

    coefs: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class _Scaled:
    """slopes * lin: `slopes` a tensor node constant along the last two axes of the bias."""

    slopes: fx.Node
    lin: _Lin
    tiled: bool = False  # slopes [H, 1, 1] repeated B times along the first of three axes


def prove_alibi(bias: Any, seq_k: Any, scores_dim: int, heads: Any = None) -> tuple[fx.Node, float]:
    """(slopes node, c) when `bias`, added to scores of `scores_dim` dims whose last is the
    `seq_k` keys, is c * slopes * (j - i) up to per-row constants (see the module docstring);
    Skip otherwise. `heads`: the scores are 3-D [B * H, Sq, Sk] with H = heads (BLOOM's
    flattened layout): the bias must then be per-head slopes [H, 1, 1] tiled over the batch,
    and the slopes node returned is that [H, 1, 1] tensor (one slope per head)."""
    if not isinstance(bias, fx.Node):
        raise Skip("the bias is not a tensor")
    be = example_value(bias)
    if not (isinstance(be, torch.Tensor) and be.dtype in _EXACT):
        raise Skip("an ALiBi bias is proven in float32/float64 only (a rounded one is a tensor)")
    if be.dim() > scores_dim or be.dim() < 1 or not same_length(be.shape[-1], seq_k):
        raise Skip("the bias does not run along the keys")
    got = _Walk()(bias)
    if not isinstance(got, _Scaled):
        raise Skip("the bias is not slopes times key positions")
    if heads is not None:
        _check_tiled(got, heads)
    elif got.tiled:
        raise Skip("the ALiBi bias repeats its slopes along an axis not proven [batch x heads]")
    c = dict(got.lin.coefs).get(-1, 0.0)
    if c == 0.0:
        raise Skip("the bias does not depend on the key position")
    slopes = example_value(got.slopes)
    if slopes.dim() > 4 or slopes.requires_grad:
        raise Skip("the ALiBi slopes require grad or have more than 4 dims")
    return got.slopes, c


def _check_tiled(got: _Scaled, heads: Any) -> None:
    """A bias added to scores flattened to [B * H, Sq, Sk] is per head: per-head slopes of
    shape [H, 1, 1] repeated along the flattened axis (`_Walk._repeat`)."""
    s = example_value(got.slopes)
    if not got.tiled:
        raise Skip("the ALiBi bias on [batch x heads] scores is not per-head slopes repeated")
    shape = (1,) * (3 - s.dim()) + tuple(s.shape)
    if s.dim() > 3 or not known_eq(shape[0], heads):
        raise Skip("the repeated ALiBi slopes are not one per head")


class _Walk:
    """Abstract values for the nodes building a bias (memoised per node)."""

    def __init__(self) -> None:
        self.memo: dict[fx.Node, Any] = {}

    def __call__(self, n: Any) -> Any:
        if not isinstance(n, fx.Node):
            return _number(n)
        if n not in self.memo:
            self.memo[n] = self._eval(n)
        return self.memo[n]

    def _eval(self, n: fx.Node) -> Any:
        val = example_value(n)
        if not isinstance(val, torch.Tensor):
            return _number(val)
        check_not_mutated(n)
        name = op_name(n)
        if name == "arange":
            return _arange(n)
        if name in ("add", "sub", "rsub"):
            return self._add(n, name)
        if name == "neg":
            return _scale(self(n.args[0]), -1.0)
        if name in ("mul", "truediv"):
            return self._mul(n, name)
        if name in ("float", "double", "to", "type_as", "contiguous", "clone"):
            x = self(n.args[0])
            src = example_value(n.args[0])
            lossless = val.dtype in _EXACT or (_integral(val) and _integral(src))
            if isinstance(x, (_Lin, _Scaled)) and not lossless:
                raise Skip(f"the bias is rounded to {val.dtype} on the way")
            return x if isinstance(x, (_Lin, _Scaled)) else val
        if name in ("unsqueeze", "squeeze", "getitem", "view", "reshape", "expand", "expand_as"):
            return self._view(n, name)
        if name == "repeat":
            return self._repeat(n)
        return val  # opaque: a tensor the proof knows nothing about (slopes, say)

    def _add(self, n: fx.Node, name: str) -> Any:
        if n.kwargs.get("alpha", 1) != 1:
            raise Skip("the bias uses add/sub with alpha")
        a, b = self(n.args[0]), self(n.args[1] if len(n.args) > 1 else n.kwargs.get("other"))
        if name == "rsub":
            a, b = b, a
        if name != "add":
            b = _scale(b, -1.0)
        if isinstance(a, _Lin) and isinstance(b, _Lin):
            merged: dict[int, float] = dict(a.coefs)
            for axis, coef in b.coefs:
                merged[axis] = merged.get(axis, 0.0) + coef
            return _lin(merged)
        for x, other in ((a, b), (b, a)):  # a position plus a number: a shifted position
            if isinstance(x, _Lin) and isinstance(other, float):
                return x
        if isinstance(a, (_Lin, _Scaled)) or isinstance(b, (_Lin, _Scaled)):
            raise Skip("the bias adds positions to something other than positions")
        return example_value(n)

    def _mul(self, n: fx.Node, name: str) -> Any:
        rhs = n.args[1] if len(n.args) > 1 else n.kwargs.get("other")
        a, b = self(n.args[0]), self(rhs)
        positions = isinstance(a, (_Lin, _Scaled)) or isinstance(b, (_Lin, _Scaled))
        if not positions:
            return example_value(n)
        if name == "truediv":
            if not isinstance(b, float) or b == 0.0 or n.kwargs.get("rounding_mode"):
                raise Skip("the bias divides positions by something other than a number")
            return _scale(a, 1.0 / b)
        for x, other, node in ((a, b, rhs), (b, a, n.args[0])):
            if isinstance(other, float):
                return _scale(x, other)
            if isinstance(x, _Lin) and isinstance(other, torch.Tensor):
                return _Scaled(_slopes_node(node, n), x)
        raise Skip("the bias multiplies positions by positions or scales them twice")

    def _repeat(self, n: fx.Node) -> Any:
        """BLOOM's `(slopes[:, None, None] * positions).repeat(B, 1, 1)`: a 3-D `_Scaled` whose
        slopes are [H, 1, 1] (or fewer dims, aligned from the end) repeated along its first
        axis only: the tiled bias (see the module docstring)."""
        x = self(n.args[0])
        if not isinstance(x, (_Lin, _Scaled)):
            return example_value(n)
        sizes = list(n.args[1:])
        if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
            sizes = list(sizes[0])
        src = example_value(n.args[0])
        if (
            not isinstance(x, _Scaled)
            or x.tiled
            or src.dim() != 3
            or len(sizes) != 3
            or any(not (isinstance(r, int) and r == 1) for r in sizes[1:])
        ):
            raise Skip("the bias repeats positions (only BLOOM's repeat of slopes is followed)")
        slopes = example_value(x.slopes)
        if not known_eq(slopes.shape[-3] if slopes.dim() >= 3 else 1, src.shape[0]):
            raise Skip("the repeated ALiBi bias's first axis is not its slopes'")
        return _Scaled(x.slopes, x.lin, tiled=True)

    def _view(self, n: fx.Node, name: str) -> Any:
        x = self(n.args[0])
        src, out = example_value(n.args[0]), example_value(n)
        if isinstance(x, _Scaled) and x.tiled:
            raise Skip("the repeated ALiBi bias is viewed or sliced after the repeat")
        if isinstance(x, _Scaled):
            # slopes * positions keep their alignment from the end through leading unit dims
            # added or removed, broadcasts, and slices of the position axes only (the slopes
            # node is read as it is)
            if name == "getitem":
                return _Scaled(x.slopes, _getitem_scaled(x.lin, n.args[1], src, out))
            if name in ("expand", "expand_as") or _same_tail(src, out) or _same_tail(out, src):
                return x
            raise Skip("the ALiBi bias is reshaped after the slopes were applied")
        if not isinstance(x, _Lin):
            return out
        if name == "getitem":
            return _getitem(x, n.args[1], src, out)
        if name == "unsqueeze":
            dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
            if not isinstance(dim, int):
                raise Skip("the bias unsqueezes a dim that is not a constant")
            dim %= out.dim()
            return _remap(x, src, out, {p: p + (p >= dim) for p in range(src.dim())})
        if name in ("expand", "expand_as"):
            return _remap(x, src, out, {p: p + out.dim() - src.dim() for p in range(src.dim())})
        return _reshape(x, src, out)


def _number(v: Any) -> float:
    """A Python number the bias uses as a factor or shift (a SymInt only as a shift: Skip when
    the value matters is the caller's rule, `_scale` refuses non-numbers)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, torch.SymInt, torch.SymFloat)):
        raise Skip(f"the bias uses {v!r}, which flashgen cannot follow")
    if isinstance(v, (torch.SymInt, torch.SymFloat)):
        return math.nan  # a length: fine as a shift, refused as a factor (`_scale`)
    return float(v)


def _integral(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)


def _lin(coefs: dict[int, float]) -> _Lin:
    return _Lin(tuple(sorted((a, c) for a, c in coefs.items() if c != 0.0)))


def _scale(x: Any, factor: Any) -> Any:
    if isinstance(x, (_Lin, _Scaled)) and isinstance(factor, float) and math.isnan(factor):
        raise Skip("the bias scales positions by a length (not a constant)")
    if isinstance(x, _Lin):
        return _lin({a: c * factor for a, c in x.coefs})
    if isinstance(x, _Scaled):
        return _Scaled(x.slopes, _scale(x.lin, factor), x.tiled)
    if isinstance(x, float):
        return x * factor if isinstance(factor, float) else math.nan
    return x  # an opaque tensor scaled: still opaque


def _arange(n: fx.Node) -> _Lin:
    args = list(n.args)
    step = args[2] if len(args) > 2 else n.kwargs.get("step", 1)
    if not (isinstance(step, int) and step == 1) or example_value(n).dim() != 1:
        raise Skip("the bias uses an arange with a step other than 1")
    return _Lin(((-1, 1.0),))


def _slopes_node(node: Any, product: fx.Node) -> fx.Node:
    """The tensor multiplying the positions: constant along the bias's last two axes (one slope
    per batch entry and head), floating."""
    t, out = example_value(node), example_value(product)
    if not t.is_floating_point():
        raise Skip("the ALiBi slopes are not floating")
    shape = (1,) * (out.dim() - t.dim()) + tuple(t.shape)
    if len(shape) < 2 or not (known_eq(shape[-1], 1) and known_eq(shape[-2], 1)):
        raise Skip("the positions are multiplied by a tensor that varies along rows or keys")
    return node


def _same_tail(src: torch.Tensor, out: torch.Tensor) -> bool:
    """out is src with unit dims added in front (alignment from the end unchanged)."""
    lead = out.dim() - src.dim()
    return (
        lead >= 0
        and all(known_eq(out.shape[i], 1) for i in range(lead))
        and all(known_eq(a, b) for a, b in zip(out.shape[lead:], src.shape, strict=True))
    )


def _remap(x: _Lin, src: torch.Tensor, out: torch.Tensor, where: dict[int, int]) -> _Lin:
    """x with input axis p (from the start) moved to output axis where[p]; coefficients on
    unit axes are dropped (index 0 there), axes counted from the end again."""
    coefs: dict[int, float] = {}
    for axis, c in x.coefs:
        p = axis + src.dim()
        if known_eq(src.shape[p], 1):
            continue
        if p not in where:
            raise Skip("the bias drops a position axis")
        coefs[where[p] - out.dim()] = c
    return _lin(coefs)


def _index_map(index: Any, src: torch.Tensor, out: torch.Tensor) -> tuple[dict, list[int]]:
    """For `src[index]`: where each sliced input axis goes in `out` (axes from the start) and
    the input axes indexed by an integer; Skip for steps, tensors and symbols as indices."""
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(i is Ellipsis for i in items) > 1:
        raise Skip("the bias indexes with two ellipses")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        used = sum(i is not None for i in items) - 1
        items[k : k + 1] = [slice(None)] * (src.dim() - used)
    items += [slice(None)] * (src.dim() - sum(i is not None for i in items))
    where, ints, p, q = {}, [], 0, 0
    for item in items:
        if item is None:
            q += 1
        elif isinstance(item, slice) and item.step in (None, 1):
            where[p] = q  # a start shifts the positions by a constant
            p, q = p + 1, q + 1
        elif isinstance(item, int) and not isinstance(item, bool):
            ints.append(p)  # one index along this axis: constant there
            p += 1
        else:
            raise Skip("the bias indexes positions with a step, a tensor or a symbol")
    if q != out.dim():
        raise Skip("unexpected indexing of the bias")
    return where, ints


def _getitem(x: _Lin, index: Any, src: torch.Tensor, out: torch.Tensor) -> _Lin:
    return _remap(x, src, out, _index_map(index, src, out)[0])


def _getitem_scaled(x: _Lin, index: Any, src: torch.Tensor, out: torch.Tensor) -> _Lin:
    """Positions of `(slopes * x)[index]` (MPT slices its ALiBi, built for the longest length,
    to the last keys): the slopes node stays valid when every axis keeps its place counted from
    the end, integers index unit axes only, and only the last two (position) axes are cut; a
    slice start there shifts the positions by a constant (a per-row constant on the rows)."""
    where, ints = _index_map(index, src, out)
    for p in ints:
        if not known_eq(src.shape[p], 1):
            raise Skip("the ALiBi bias is indexed along an axis of its slopes")
    for p, q in where.items():
        if p - src.dim() != q - out.dim():
            raise Skip("the ALiBi bias's axes move after the slopes were applied")
        if p - src.dim() < -2 and not known_eq(src.shape[p], out.shape[q]):
            raise Skip("the ALiBi bias is sliced along an axis of its slopes")
    return _remap(x, src, out, where)


def _reshape(x: _Lin, src: torch.Tensor, out: torch.Tensor) -> _Lin:
    """view/reshape that only adds or removes unit dims: the other dims keep their order."""
    keep_in = [p for p in range(src.dim()) if not known_eq(src.shape[p], 1)]
    keep_out = [p for p in range(out.dim()) if not known_eq(out.shape[p], 1)]
    if len(keep_in) != len(keep_out) or not all(
        known_eq(src.shape[a], out.shape[b]) for a, b in zip(keep_in, keep_out, strict=True)
    ):
        raise Skip("the bias reshapes its position axes")
    return _remap(x, src, out, dict(zip(keep_in, keep_out, strict=True)))
