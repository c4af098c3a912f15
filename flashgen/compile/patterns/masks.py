"""Proving a mask causal for EVERY length the compiled graph accepts, not just the traced one.

Why not evaluate the mask at the traced length: a graph compiled with dynamic lengths (or
recompiled with symbolic lengths by Dynamo's automatic dynamic) is reused for every length in
its range. A sliding-window band evaluated at a length shorter than its window equals the causal
mask, and is not one at longer lengths; baking "causal" in gave wrong results (issue 11).

So the ops that build the mask are interpreted symbolically, as a function of the diagonal offset
d = key index - query index: fills (ones/zeros/full), tril/triu offsets, comparisons of arange
row and column indices, slices of buffers whose diagonals are constant, casts, comparisons with
constants and boolean logic. Such a mask is piecewise constant in d with integer breakpoints
(`_Diag`), so it can be checked for every d that the largest accepted length reaches: the upper
bound of the length in the graph's shape env (the length itself for static shapes; unbounded
for plain dynamic lengths). Any op not understood, an offset that is not a constant, a mask
modified in place, and a mask read from a forward() argument are refused: what is not proven
is never replaced.
"""

from __future__ import annotations

import bisect
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .core import _NEAR_NEG_INF, Skip, _ev, _known_eq


class _Values:
    """Real tensors for module state (buffers, tensor attributes): what a mask may read."""

    def __init__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> None:
        self.gm = gm
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.by_node = dict(zip(phs, example_inputs, strict=False))

    def tensor(self, n: Any) -> torch.Tensor:
        if n.op == "get_attr":
            obj: Any = self.gm
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
        elif n in self.by_node:
            obj = self.by_node[n]
        else:
            raise Skip(f"no example value for {n.name}")
        if not isinstance(obj, torch.Tensor):
            raise Skip(f"{n.name} is not a tensor")
        if isinstance(obj, torch._subclasses.FakeTensor):
            raise Skip(f"{n.name} has no real value at compile time")
        return obj


def _is_buffer_placeholder(n: Any) -> bool:
    """True for module state (buffers, parameters, tensor attributes, globals) that Dynamo
    lifted into graph inputs; False for forward() arguments, which may differ on every call.

    Dynamo names a forward() argument `L['mask']` (or `L['args'][0]`, `L['kwargs']['mask']`);
    state is reached through an attribute (`L['self']._buffers['bias']`) or is a global.
    """
    arg = n.meta.get("grapharg")
    source = getattr(arg, "source", None) if arg is not None else None
    name = getattr(source, "name", "") if source is not None else ""
    name = name() if callable(name) else name
    if not isinstance(name, str) or not name:
        return False
    if name.startswith("G["):
        return True
    return bool(re.fullmatch(r"L\[[^\]]+\](\[[^\]]+\])*", name)) is False


# ----------------------------------------------------------------------------- abstract values


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


@dataclass(frozen=True)
class _Diag:
    """A mask whose value depends only on d = j - i over its last two dims (i: row, j: column):
    vals[0] for d < cuts[0], vals[k] for cuts[k-1] <= d < cuts[k], vals[-1] for d >= cuts[-1].
    With no cuts it is a constant, and then its layout does not matter."""

    cuts: tuple[int, ...]
    vals: tuple[Any, ...]

    def at(self, d: float) -> Any:
        return self.vals[bisect.bisect_right(self.cuts, d)]

    def regions(self) -> list[tuple[float, float, Any]]:
        """(first d, last d, value) for each constant region, ends may be -inf/inf."""
        edges = [-math.inf, *self.cuts, math.inf]
        return [(edges[k], edges[k + 1] - 1, v) for k, v in enumerate(self.vals)]

    def shifted(self, s: int) -> _Diag:
        """f(d + s): the pattern seen through a slice whose column start is s past its row start."""
        return _Diag(tuple(c - s for c in self.cuts), self.vals)


def _const(v: Any) -> _Diag:
    return _Diag((), (v,))


def _combine(parts: list[_Diag], fn: Any) -> _Diag:
    """Pointwise fn over several patterns (merging their breakpoints), normalised."""
    cuts = sorted({c for p in parts for c in p.cuts})
    reps = [cuts[0] - 1] + cuts if cuts else [0]
    try:
        vals = [fn(*(p.at(r) for p in parts)) for r in reps]
    except (ArithmeticError, TypeError, ValueError) as e:
        raise Skip(f"could not follow the mask's values ({type(e).__name__}: {e})") from e
    out_cuts: list[int] = []
    out_vals = [vals[0]]
    for c, v in zip(cuts, vals[1:], strict=True):
        if not _same(v, out_vals[-1]):
            out_cuts.append(c)
            out_vals.append(v)
    return _Diag(tuple(out_cuts), tuple(out_vals))


@dataclass(frozen=True)
class _Index:
    """An arange: its value at each element is the element's index along axis `pos` (counted
    from the end, -1 the last) plus `off` (a sympy integer expression)."""

    pos: int
    off: Any


_Abstract = _Diag | _Index


def _expr(x: Any) -> Any:
    """A sympy integer expression for an int / SymInt (a size or a slice start)."""
    if isinstance(x, bool):
        raise Skip("a bool where a size was expected")
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, torch.SymInt):
        return x.node.expr
    raise Skip(f"the mask uses {x!r} where an integer was expected")


def _const_int(x: Any, what: str) -> int:
    """x as a Python int if it is the same constant for every length, else Skip."""
    e = sympy.simplify(_expr(x)) if not isinstance(x, sympy.Basic) else sympy.simplify(x)
    if e.is_Integer:
        return int(e)
    raise Skip(
        f"the mask's {what} depends on the sequence length ({e}); only constant offsets can be "
        "proven for every length"
    )


# ----------------------------------------------------------------------------- op tables

_CMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge}  # fmt: skip
_LOGIC = {
    "logical_and": lambda a, b: bool(a) and bool(b),
    "logical_or": lambda a, b: bool(a) or bool(b),
    "logical_xor": lambda a, b: bool(a) != bool(b),
    "and_": operator.and_,
    "or_": operator.or_,
    "xor": operator.xor,
}
_ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "truediv": operator.truediv, "rsub": lambda a, b: b - a}  # fmt: skip
_CASTS = {"bool", "float", "half", "double", "int", "long", "bfloat16", "to", "type", "type_as",
          "contiguous", "clone", "detach"}  # fmt: skip
_CREATE = {"ones": 1, "zeros": 0, "ones_like": 1, "zeros_like": 0, "new_ones": 1, "new_zeros": 0}
_FULL = {"full": 1, "full_like": 1, "new_full": 2}  # index of the fill value argument
_VIEWS = {"view", "reshape", "unsqueeze", "expand", "expand_as", "broadcast_to", "getitem"}
_ALIASES = {"greater_equal": "ge", "greater": "gt", "less_equal": "le", "less": "lt",
            "not_equal": "ne", "invert": "bitwise_not", "neg": "neg", "multiply": "mul",
            "subtract": "sub", "div": "truediv", "true_divide": "truediv", "divide": "truediv",
            "bitwise_and": "and_", "bitwise_or": "or_", "bitwise_xor": "xor", "and": "and_",
            "or": "or_"}  # fmt: skip
_TORCH_NAMESPACES = (torch, torch.Tensor, torch.special)
_INPLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                      operator.ior, operator.ixor, operator.ilshift, operator.irshift}  # fmt: skip


def _op_name(n: fx.Node) -> str | None:
    """One name for the function, method and operator spellings of an op (None: unknown)."""
    if n.op == "call_method":
        name = str(n.target)
    elif n.op == "call_function":
        t = n.target
        if t is operator.getitem:
            return "getitem"
        name = getattr(t, "__name__", "")
        if getattr(operator, name, None) is t:
            pass
        elif not any(getattr(ns, name, None) is t for ns in _TORCH_NAMESPACES):
            return None
    else:
        return None
    name = name.strip("_") if name.startswith("__") else name
    return _ALIASES.get(name, name)


def _mutates(u: fx.Node, n: fx.Node) -> bool:
    """True if node u writes into n's storage (an in-place method or op, `n[...] = x`, out=n)."""
    if u.kwargs.get("out") is n:
        return True
    if not (u.args and u.args[0] is n):
        return False
    if u.op == "call_method":
        name = str(u.target)
    elif u.op == "call_function":
        if getattr(operator, getattr(u.target, "__name__", ""), None) is u.target:
            return u.target in _INPLACE_OPERATORS  # not operator.and_, which only looks so
        name = getattr(u.target, "__name__", "")
    else:
        return False
    return name.endswith("_") and not name.startswith("__")


def _check_not_mutated(n: fx.Node) -> None:
    """Skip if n, or a view of it, is modified in place anywhere in the graph: the graph then
    does not spell the value the mask really has."""
    work, seen = [n], set()
    while work:
        x = work.pop()
        if x in seen:
            continue
        seen.add(x)
        for u in x.users:
            if _mutates(u, x):
                raise Skip(f"the mask ({x.name}) is modified in place, so it cannot be proven")
            if u.args and u.args[0] is x and _op_name(u) in _VIEWS | {"transpose", "permute"}:
                work.append(u)


# ----------------------------------------------------------------------------- interpreter


class _Interpreter:
    """Abstract values (_Diag / _Index / Python numbers) for the nodes that build a mask."""

    def __init__(self, values: _Values) -> None:
        self.values = values
        self.memo: dict[fx.Node, Any] = {}

    def __call__(self, n: Any) -> Any:
        if isinstance(n, (list, tuple)):
            raise Skip("the mask uses a list where a tensor was expected")
        if not isinstance(n, fx.Node):
            if isinstance(n, (bool, int, float)):
                return n
            raise Skip(f"the mask uses {n!r}, which flashgen cannot follow")
        if n not in self.memo:
            self.memo[n] = self._eval(n)
        return self.memo[n]

    def _scalar(self, n: Any) -> Any:
        """A Python number for a non-tensor argument (a constant, or a SymInt that is one)."""
        v = _ev(n) if isinstance(n, fx.Node) else n
        if isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, torch.SymInt):
            return _const_int(v, "scalar operand")
        raise Skip(f"the mask uses {getattr(n, 'name', n)!r}, which is not a constant")

    def _eval(self, n: fx.Node) -> Any:
        val = _ev(n)
        if not isinstance(val, torch.Tensor):
            return self._scalar(n)
        _check_not_mutated(n)
        if n.op == "placeholder":
            if not _is_buffer_placeholder(n):
                raise Skip(
                    f"the mask is read from the forward() input {n.name}; only masks from "
                    "module buffers or built inside forward() can be proven causal (for a "
                    "causal mask use is_causal=True / a tril buffer)"
                )
            return _from_tensor(self.values.tensor(n), n.name)
        if n.op == "get_attr":
            return _from_tensor(self.values.tensor(n), str(n.target))
        name = _op_name(n)
        handler = getattr(self, f"_op_{name}", None) if name else None
        if name in _CMP:
            return self._binary(n, _CMP[name], compare=name)
        if name in _LOGIC:
            return self._binary(n, _LOGIC[name])
        if name in _ARITH:
            return self._arith(n, name)
        if name in _CASTS:
            return self._cast(n, self(n.args[0]))
        if name in _CREATE:
            return self._cast(n, _const(_CREATE[name]))
        if name in _FULL:
            i = _FULL[name]
            fill = n.args[i] if len(n.args) > i else n.kwargs.get("fill_value")
            return self._cast(n, _const(self._scalar(fill)))
        if name in _VIEWS:
            return _relayout(self(n.args[0]), _ev(n.args[0]), val, n)
        if handler is None:
            raise Skip(f"the mask uses {n.target!r}, which flashgen cannot prove anything about")
        return handler(n)

    # -- helpers
    def _cast(self, n: fx.Node, a: Any) -> Any:
        """Convert pattern values to n's dtype, as the tensor op does."""
        if isinstance(a, _Index):
            return a
        dt = _ev(n).dtype
        if dt == torch.bool:
            fn: Any = bool
        elif dt.is_floating_point:
            fn = float
        elif dt.is_complex:
            raise Skip("complex masks are not supported")
        else:
            fn = int
        return _combine([a if isinstance(a, _Diag) else _const(a)], fn)

    def _binary(self, n: fx.Node, fn: Any, compare: str | None = None) -> Any:
        rhs = n.args[1] if len(n.args) > 1 else n.kwargs.get("other")
        a, b = self(n.args[0]), self(rhs)
        out = _ev(n)
        if isinstance(a, _Index) or isinstance(b, _Index):
            if compare is None or not (isinstance(a, _Index) and isinstance(b, _Index)):
                raise Skip(
                    "the mask compares an arange with something other than another arange "
                    "(e.g. a padding length); only row/column index comparisons are diagonal"
                )
            return _compare_indices(a, b, compare, (n.args[0], rhs), out)
        for x, node in ((a, n.args[0]), (b, rhs)):
            if isinstance(x, _Diag) and x.cuts:
                _check_trailing(node, out)
        return self._cast(n, _combine([_as_diag(a), _as_diag(b)], fn))

    def _arith(self, n: fx.Node, name: str) -> Any:
        if n.kwargs.get("alpha", 1) != 1 or n.kwargs.get("rounding_mode") is not None:
            raise Skip("the mask uses add/sub with alpha or a rounding mode")
        a, b = self(n.args[0]), self(n.args[1] if len(n.args) > 1 else n.kwargs.get("other"))
        if isinstance(a, _Index) or isinstance(b, _Index):
            # arange + c, c + arange, arange - c: still an index with a shifted offset.
            idx, other = (a, b) if isinstance(a, _Index) else (b, a)
            if (
                isinstance(other, _Index)
                or name not in ("add", "sub")
                or (name == "sub" and idx is b)
            ):
                raise Skip("the mask does arithmetic on aranges other than adding a constant")
            arg = n.args[1] if idx is a else n.args[0]
            shift = _expr(_ev(arg) if isinstance(arg, fx.Node) else arg)
            return _Index(idx.pos, idx.off + (shift if name == "add" else -shift))
        return self._binary(n, _ARITH[name])

    # -- ops with their own rules
    def _op_bitwise_not(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, _Index):
            raise Skip("the mask inverts an arange")
        if _ev(n.args[0]).dtype == torch.bool:
            return _combine([a], lambda v: not v)
        return self._cast(n, _combine([a], operator.invert))

    def _op_logical_not(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, _Index):
            raise Skip("the mask negates an arange")
        return self._cast(n, _combine([a], lambda v: not v))

    def _op_neg(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, _Index):
            raise Skip("the mask negates an arange")
        return self._cast(n, _combine([a], operator.neg))

    def _triangle(self, n: fx.Node, keep_lower: bool) -> Any:
        a = self(n.args[0])
        if isinstance(a, _Index):
            raise Skip("the mask takes tril/triu of an arange")
        k = n.args[1] if len(n.args) > 1 else n.kwargs.get("diagonal", 0)
        k = _const_int(_ev(k) if isinstance(k, fx.Node) else k, "tril/triu diagonal")
        # tril(k) keeps d <= k; triu(k) keeps d >= k; the rest becomes zero.
        keep = _Diag((k + 1,), (True, False)) if keep_lower else _Diag((k,), (False, True))
        zero = False if _ev(n).dtype == torch.bool else 0
        return self._cast(n, _combine([a, keep], lambda v, kept: v if kept else zero))

    def _op_tril(self, n: fx.Node) -> Any:
        return self._triangle(n, True)

    def _op_triu(self, n: fx.Node) -> Any:
        return self._triangle(n, False)

    def _op_arange(self, n: fx.Node) -> Any:
        args = list(n.args)
        start = args[0] if len(args) > 1 else n.kwargs.get("start", 0)
        step = args[2] if len(args) > 2 else n.kwargs.get("step", 1)
        if self._scalar(step) != 1:
            raise Skip("the mask uses an arange with a step other than 1")
        if _ev(n).dim() != 1:
            raise Skip("unexpected arange shape")
        start = _ev(start) if isinstance(start, fx.Node) else start
        if isinstance(start, float):
            if start != int(start):
                raise Skip("the mask uses an arange with a fractional start")
            start = int(start)
        return _Index(-1, _expr(start))

    def _op_masked_fill(self, n: fx.Node) -> Any:
        x, mask = self(n.args[0]), self(n.args[1])
        value = self(n.args[2] if len(n.args) > 2 else n.kwargs.get("value"))
        if any(isinstance(t, _Index) for t in (x, mask, value)):
            raise Skip("the mask fills an arange")
        for node in n.args[:2]:
            _check_trailing(node, _ev(n))
        return self._cast(
            n,
            _combine([_as_diag(x), _as_diag(mask), _as_diag(value)], lambda a, m, f: f if m else a),
        )

    def _op_where(self, n: fx.Node) -> Any:
        if len(n.args) != 3:
            raise Skip("the mask uses torch.where with one argument")
        parts = [self(a) for a in n.args]
        if any(isinstance(t, _Index) for t in parts):
            raise Skip("the mask selects from an arange")
        for node in n.args:
            if isinstance(node, fx.Node):
                _check_trailing(node, _ev(n))
        return self._cast(n, _combine([_as_diag(p) for p in parts], lambda c, a, b: a if c else b))


def _as_diag(x: Any) -> _Diag:
    return x if isinstance(x, _Diag) else _const(x)


def _check_trailing(node: Any, out: torch.Tensor) -> None:
    """A diagonal operand must not be broadcast along its own rows or columns."""
    if not isinstance(node, fx.Node):
        return
    src = _ev(node)
    if not isinstance(src, torch.Tensor) or src.dim() < 2 or out.dim() < 2:
        raise Skip("a diagonal mask pattern lost its two trailing dims")
    if not (_known_eq(src.shape[-2], out.shape[-2]) and _known_eq(src.shape[-1], out.shape[-1])):
        raise Skip("a diagonal mask pattern is broadcast along its rows or columns")


def _compare_indices(a: _Index, b: _Index, op: str, nodes: tuple, out: torch.Tensor) -> _Diag:
    """row_index + o1 OP col_index + o2 as a function of d = col - row."""
    if out.dim() < 2:
        raise Skip("the mask compares two aranges along one axis")
    for idx, node in ((a, nodes[0]), (b, nodes[1])):
        src = _ev(node)
        if not _known_eq(src.shape[idx.pos], out.shape[idx.pos]):
            raise Skip("an arange in the mask is broadcast along its own axis")
    if {a.pos, b.pos} != {-2, -1}:
        raise Skip("the mask compares aranges that are not its row and column indices")
    if a.pos == -1:  # put the row index on the left: col OP row == row OP' col
        a, b = b, a
        op = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(op, op)
    # row + o1 OP col + o2  <=>  c OP d with c = o1 - o2, d = col - row.
    c = _const_int(a.off - b.off, "arange offset")
    inside = {
        "ge": _Diag((c + 1,), (True, False)),  # d <= c
        "gt": _Diag((c,), (True, False)),  # d < c
        "le": _Diag((c,), (False, True)),  # d >= c
        "lt": _Diag((c + 1,), (False, True)),  # d > c
        "eq": _Diag((c, c + 1), (False, True, False)),
        "ne": _Diag((c, c + 1), (True, False, True)),
    }
    return inside[op]


def _axis_map(src: torch.Tensor, out: torch.Tensor, n: fx.Node) -> list[int | None]:
    """For each axis of `out`, the axis of `src` it shows (None: a new size-1/broadcast axis).

    Views are followed only where the correspondence is certain: slices and None indices,
    unsqueeze, expand (leading axes), and view/reshape that only add or drop size-1 axes."""
    name = _op_name(n)
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
            if _known_eq(s, 1):
                continue
            if not statically_known_true(s != 1):
                raise Skip("the mask is reshaped with a size that may or may not be 1")
            axes.append(i)
        return axes

    si, oi = big(src), big(out)
    if len(si) != len(oi) or not all(
        _known_eq(src.shape[a], out.shape[b]) for a, b in zip(si, oi, strict=True)
    ):
        raise Skip("the mask is reshaped in a way flashgen does not follow")
    pairs = dict(zip(oi, si, strict=True))
    return [pairs.get(o) for o in range(out.dim())]


def _getitem_map(src: torch.Tensor, index: Any) -> list[Any]:
    """Axis map for `src[index]` with slices/None/Ellipsis/integers; slices carry (axis, start),
    an integer drops its axis (which must then not be a pattern axis)."""
    idx = index if isinstance(index, tuple) else (index,)

    def is_int(i: Any) -> bool:
        v = _ev(i) if isinstance(i, fx.Node) else i
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
        start = _ev(start) if isinstance(start, fx.Node) else start
        if start is None:
            start = 0
        if isinstance(start, int) and start < 0:
            start = src.shape[axis] + start
        elif isinstance(start, torch.SymInt) and not statically_known_true(start >= 0):
            raise Skip("the mask is sliced from a start that may be negative")
        out.append((axis, _expr(start)))
        axis += 1
    return out


def _relayout(a: Any, src: torch.Tensor, out: torch.Tensor, n: fx.Node) -> Any:
    """Follow a view/slice of an abstract value: an arange's axis moves, a diagonal pattern
    must keep its rows and columns last (and shifts by a slice's column start minus row start)."""
    if not isinstance(a, (_Diag, _Index)):
        raise Skip("a view of a non-tensor in the mask")
    if isinstance(a, _Diag) and not a.cuts:
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
        if not isinstance(amap[o], tuple) and not _known_eq(src.shape[src_axis], out.shape[o]):
            raise Skip("the mask's view broadcasts one of its pattern axes")
        return o

    if isinstance(a, _Index):
        o = out_axis(src.dim() + a.pos)
        return _Index(o - out.dim(), a.off + sympy.sympify(starts[o]))
    rows, cols = out_axis(src.dim() - 2), out_axis(src.dim() - 1)
    if (rows, cols) != (out.dim() - 2, out.dim() - 1):
        raise Skip("the mask's view moves its row/column axes")
    shift = _const_int(sympy.sympify(starts[cols]) - sympy.sympify(starts[rows]), "slice offset")
    return a.shifted(shift)


def _from_tensor(t: torch.Tensor, name: str) -> _Diag:
    """A real tensor (module buffer) as a pattern: every trailing 2-D slice the same, and every
    diagonal constant. Outside the buffer the edge diagonals are extended: a slice starting at
    the same row and column never reaches them."""
    if t.dim() < 2 or t.is_complex():
        raise Skip(f"mask tensor {name} is not a 2-D pattern")
    t = t.detach()
    first = t.reshape(-1, *t.shape[-2:])[0] if t.dim() > 2 else t
    if t.dim() > 2 and not bool((t == first).all()):
        raise Skip(f"mask tensor {name} differs between its leading slices, so it is not causal")
    r, c = first.shape
    if r == 0 or c == 0:
        raise Skip(f"mask tensor {name} is empty")
    if not torch.equal(first[1:, 1:], first[:-1, :-1]):
        raise Skip(f"mask tensor {name} is not constant along its diagonals, so it is not causal")
    # d from -(r-1) to c-1: first column bottom-up, then the first row.
    diag = torch.cat([first[1:, 0].flip(0), first[0, :]]).cpu().tolist()
    cuts: list[int] = []
    vals = [diag[0]]
    for k, v in enumerate(diag[1:], start=1):
        if not _same(v, vals[-1]):
            cuts.append(k - (r - 1))
            vals.append(v)
    return _Diag(tuple(cuts), tuple(vals))


# ----------------------------------------------------------------------------- the proof


def diagonal_pattern(mask: Any, values: _Values) -> _Diag:
    """The mask as a function of d = key index - query index, valid for every length."""
    if not isinstance(mask, fx.Node):
        raise Skip("the mask is not a tensor computed in the graph")
    try:
        got = _Interpreter(values)(mask)
    except Skip:
        raise
    except Exception as e:  # an unexpected graph shape is "not proven", never a failed compile
        raise Skip(f"could not follow the mask ({type(e).__name__}: {e})") from e
    if isinstance(got, _Index):
        raise Skip("the mask is an arange, not a comparison of row and column indices")
    if not isinstance(got, _Diag):
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


def _kept(v: Any, *, keep: bool, additive: bool) -> bool | None:
    """Whether mask value v lets a score through (None: neither kept nor -inf)."""
    if additive:
        if v == 0:
            return True
        return False if v <= _NEAR_NEG_INF else None
    return bool(v) if keep else not bool(v)


def prove_causal(mask: Any, values: _Values, tq: Any, tk: Any, *, keep: bool) -> None:
    """Raise Skip (with the reason) unless `mask` is the top-left causal mask for every query
    and key length the graph may be called with.

    The two lengths must be provably equal (a slice causal at one pair, e.g.
    `tril(ones(tk, tk))[-tq:]`, may not be at another); the mask's pattern in d = j - i must
    keep exactly d <= 0 for every |d| below the largest accepted length. `tq`, `tk`: the
    (possibly symbolic) lengths; `keep`: for boolean masks, True where they mark kept
    positions (SDPA) and False where they mark masked ones (masked_fill, MultiheadAttention);
    float masks are additive (0 kept, -inf masked)."""
    if not isinstance(mask, fx.Node):
        raise Skip("the mask is not a tensor computed in the graph")
    if not _known_eq(tq, tk):
        raise Skip("query and key lengths may differ")
    me = _ev(mask)
    if not isinstance(me, torch.Tensor) or me.is_complex():
        raise Skip("the mask is not a real tensor")
    additive = me.is_floating_point()
    if not additive and me.dtype != torch.bool:
        raise Skip(f"a {me.dtype} mask is neither boolean nor additive")
    pattern = diagonal_pattern(mask, values)
    if pattern.cuts and not (
        me.dim() >= 2 and _known_eq(me.shape[-2], tq) and _known_eq(me.shape[-1], tk)
    ):
        raise Skip("the mask's last two dims are not [query length, key length]")
    reach = _max_length(tq) - 1
    cuts = sorted({*pattern.cuts, 1})  # 1: where causal changes from kept to masked
    split = _Diag(tuple(cuts), tuple(pattern.at(r) for r in [cuts[0] - 1, *cuts]))
    for lo, hi, v in split.regions():
        lo, hi = max(lo, -reach), min(hi, reach)
        if lo > hi:
            continue
        kept = _kept(v, keep=keep, additive=additive)
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
