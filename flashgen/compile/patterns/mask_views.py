"""Views and slices of an abstract mask value (`mask_values`): which axis of the source each axis
of a view shows (slices, None indices, unsqueeze, expand, size-1 reshapes), and how an arange or
a diagonal pattern moves through it. Anything not followed with certainty is refused (`Skip`).
Used by the interpreter (`mask_interpreter`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .core import Skip, example_value, known_eq
from .mask_values import Diag, Index, Offset, const_int, expr, op_name


def _axis_map(src: torch.Tensor, out: torch.Tensor, n: fx.Node) -> list[int | None]:
    """For each axis of `out`, the axis of `src` it shows (None: a new size-1/broadcast axis).

    Views are followed only where the correspondence is certain: slices and None indices,
    unsqueeze, expand (leading axes), and view/reshape that only add or drop size-1 axes."""
    name = op_name(n)
    if name == "getitem":
        return _getitem_map(src, n.args[1])
    if name == "unsqueeze":
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        if not isinstance(dim, int):
            raise Skip("unsqueeze with a non-constant dim in the mask")
        d = dim % out.dim()
        return [None if o == d else (o if o < d else o - 1) for o in range(out.dim())]
    if name in ("expand", "expand_as", "broadcast_to"):
        lead = out.dim() - src.dim()
        return [None if o < lead else o - lead for o in range(out.dim())]

    # view / reshape: the axes of size other than 1 must pair up one to one.
    def big(t: torch.Tensor) -> list[int]:
        axes = []
        for i, s in enumerate(t.shape):
            if known_eq(s, 1):
                continue
            if not statically_known_true(s != 1):
                raise Skip("the mask is reshaped with a size that may or may not be 1")
            axes.append(i)
        return axes

    si, oi = big(src), big(out)
    if len(si) != len(oi) or not all(
        known_eq(src.shape[a], out.shape[b]) for a, b in zip(si, oi, strict=True)
    ):
        raise Skip("the mask is reshaped in a way flashgen does not follow")
    pairs = dict(zip(oi, si, strict=True))
    return [pairs.get(o) for o in range(out.dim())]


def _getitem_map(src: torch.Tensor, index: Any) -> list[Any]:
    """Axis map for `src[index]` with slices/None/Ellipsis/integers; slices carry (axis, start),
    an integer drops its axis (which must then not be a pattern axis)."""
    idx = index if isinstance(index, tuple) else (index,)

    def is_int(i: Any) -> bool:
        v = example_value(i) if isinstance(i, fx.Node) else i
        return isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool)

    if any(not (i is None or i is Ellipsis or isinstance(i, slice) or is_int(i)) for i in idx):
        raise Skip("the mask is indexed with tensors")
    used = sum(1 for i in idx if isinstance(i, slice) or is_int(i))
    if idx.count(Ellipsis) > 1:
        raise Skip("bad index")
    full = []
    for i in idx:
        if i is Ellipsis:
            full.extend([slice(None)] * (src.dim() - used))
        else:
            full.append(i)
    full.extend([slice(None)] * (src.dim() - sum(1 for i in full if i is not None)))
    out: list[Any] = []
    axis = 0
    for i in full:
        if i is None:
            out.append(None)
            continue
        if not isinstance(i, slice):
            axis += 1  # an integer index: this axis is gone
            continue
        if i.step not in (None, 1):
            raise Skip("the mask is sliced with a step")
        start = i.start
        start = example_value(start) if isinstance(start, fx.Node) else start
        if start is None:
            start = 0
        if isinstance(start, int) and start < 0:
            start = src.shape[axis] + start
        elif isinstance(start, torch.SymInt) and not _guard_non_negative(start):
            raise Skip("the mask is sliced from a start that may be negative")
        out.append((axis, expr(start)))
        axis += 1
    return out


def _guard_non_negative(start: torch.SymInt) -> bool:
    """Whether a symbolic slice start is >= 0: proven, or so at this trace and then guarded to
    stay so (a KV cache's rows of a causal buffer, `bias[tk - tq : tk]`; a negative start would
    wrap around instead). False for one negative now, or unbacked."""
    if statically_known_true(start >= 0):
        return True
    hint = start.node.hint
    return hint is not None and hint >= 0 and bool(start >= 0)


def relayout(a: Any, src: torch.Tensor, out: torch.Tensor, n: fx.Node, kv_shift: Any = None) -> Any:
    """Follow a view/slice of an abstract value: an arange's axis moves, a diagonal pattern
    must keep its rows and columns last (and shifts by a slice's column start minus row start).
    `kv_shift`: Sk - Sq where lengths may differ (`Interpreter.shift`): a buffer's rows sliced
    from Sk - Sq + c (`bias[tk - tq : tk]`, a KV cache's rows of a causal buffer) shift its
    pattern by a length, which read from the bottom-right diagonal is the constant c."""
    if not isinstance(a, (Diag, Index, Offset)):
        raise Skip("a view of a non-tensor in the mask")
    if isinstance(a, Diag) and not a.cuts:
        return a
    amap = _axis_map(src, out, n)
    starts = [0] * len(amap)
    axes: list[int | None] = []
    for o, m in enumerate(amap):
        if isinstance(m, tuple):
            axes.append(m[0])
            starts[o] = m[1]
        else:
            axes.append(m)

    def out_axis(src_axis: int) -> int:
        hits = [o for o, s in enumerate(axes) if s == src_axis]
        if len(hits) != 1:
            raise Skip("the mask's view drops or repeats one of its pattern axes")
        o = hits[0]
        # A slice may shorten the axis; anything else that changes its size broadcasts it.
        if not isinstance(amap[o], tuple) and not known_eq(src.shape[src_axis], out.shape[o]):
            raise Skip("the mask's view broadcasts one of its pattern axes")
        return o

    if isinstance(a, Index):
        o = out_axis(src.dim() + a.pos)
        return Index(o - out.dim(), a.off + sympy.sympify(starts[o]))
    rows, cols = out_axis(src.dim() - 2), out_axis(src.dim() - 1)
    if (rows, cols) != (out.dim() - 2, out.dim() - 1):
        raise Skip("the mask's view moves its row/column axes")
    offset = sympy.sympify(starts[cols]) - sympy.sympify(starts[rows])
    try:
        return a.shifted(const_int(offset, "slice offset"))
    except Skip:
        rest = None if kv_shift is None else sympy.simplify(offset + kv_shift)
        if rest is None or not rest.is_Integer or a.bottom_right:
            raise
    # f(d + offset) with offset = c - (Sk - Sq) is f(d' + c), d' = d - (Sk - Sq)
    return dataclasses.replace(a.shifted(int(rest)), bottom_right=True)
