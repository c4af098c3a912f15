"""The symbolic interpreter of the causal-mask proof (`masks`): walks the nodes that build a mask
and gives each an abstract value (`mask_values._Diag` / `Index` / a Python number), refusing
(`Skip`) any op it does not understand.
"""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
from torch import fx

from .core import Skip, example_value, known_eq
from .mask_values import (
    ARITH,
    CASTS,
    CMP,
    CREATE,
    FULL,
    LOGIC,
    VIEWS,
    Diag,
    Index,
    Offset,
    Values,
    check_not_mutated,
    combine,
    const,
    const_int,
    expr,
    is_buffer_placeholder,
    is_parameter_placeholder,
    op_name,
    same,
)
from .mask_views import relayout

# ----------------------------------------------------------------------------- interpreter


class Interpreter:
    """Abstract values (Diag / Index / Python numbers) for the nodes that build a mask."""

    def __init__(self, values: Values, shift: Any = None) -> None:
        """`shift`: Sk - Sq (a sympy expression) for the lengths the mask is proven against;
        with it, a row/column comparison whose offset is Sk - Sq plus a constant is a diagonal
        counted from the bottom-right (`Diag.bottom_right`). None: top-left only."""
        self.values = values
        self.shift = shift
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
        v = example_value(n) if isinstance(n, fx.Node) else n
        if isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, torch.SymInt):
            return const_int(v, "scalar operand")
        raise Skip(f"the mask uses {getattr(n, 'name', n)!r}, which is not a constant")

    def _eval(self, n: fx.Node) -> Any:
        val = example_value(n)
        if not isinstance(val, torch.Tensor):
            return self._scalar(n)
        check_not_mutated(n)
        if n.op == "placeholder":
            if is_parameter_placeholder(n):
                raise Skip(
                    f"the mask reads the parameter {n.name}, whose learned values change in "
                    "training: nothing is proven from them"
                )
            if not is_buffer_placeholder(n):
                raise Skip(
                    f"the mask is read from the forward() input {n.name}; only masks from "
                    "module buffers or built inside forward() can be proven causal (for a "
                    "causal mask use is_causal=True / a tril buffer)"
                )
            return _from_tensor(self.values.tensor(n), n.name)
        if n.op == "get_attr":
            return _from_tensor(self.values.tensor(n), str(n.target))
        name = op_name(n)
        handler = getattr(self, f"_op_{name}", None) if name else None
        if name in CMP:
            return self._binary(n, CMP[name], compare=name)
        if name in LOGIC:
            return self._binary(n, LOGIC[name])
        if name in ARITH:
            return self._arith(n, name)
        if name in CASTS:
            return self._cast(n, self(n.args[0]))
        if name in CREATE:
            return self._cast(n, const(CREATE[name]))
        if name in FULL:
            i = FULL[name]
            fill = n.args[i] if len(n.args) > i else n.kwargs.get("fill_value")
            return self._cast(n, const(self._scalar(fill)))
        if name == "getitem" and _tensor_index(n.args[1]):
            return self._gather(n)
        if name in VIEWS:
            return relayout(self(n.args[0]), example_value(n.args[0]), val, n, self.shift)
        if handler is None:
            raise Skip(f"the mask uses {n.target!r}, which flashgen cannot prove anything about")
        return handler(n)

    # -- helpers
    def _cast(self, n: fx.Node, a: Any) -> Any:
        """Convert pattern values to n's dtype, as the tensor op does."""
        if isinstance(a, (Index, Offset)):
            if isinstance(a, Offset) and example_value(n).dtype == torch.bool:
                raise Skip("the mask casts a key - query offset to bool")
            return a
        dt = example_value(n).dtype
        if dt == torch.bool:
            fn: Any = bool
        elif dt.is_floating_point:
            fn = float
        elif dt.is_complex:
            raise Skip("complex masks are not supported")
        else:
            fn = int
        return combine([a if isinstance(a, Diag) else const(a)], fn)

    def _binary(self, n: fx.Node, fn: Any, compare: str | None = None) -> Any:
        rhs = n.args[1] if len(n.args) > 1 else n.kwargs.get("other")
        a, b = self(n.args[0]), self(rhs)
        out = example_value(n)
        if isinstance(a, Offset) or isinstance(b, Offset):
            if compare is None:
                raise Skip("the mask uses a key - query offset other than comparing it")
            off, c = _offset_and_number(a, b, "compares")
            return off.compare(fn, c, off is b)
        if isinstance(a, Index) or isinstance(b, Index):
            if compare is not None and not (isinstance(a, Index) and isinstance(b, Index)):
                return self._cast(n, _index_bound(a, b, compare))
            if compare is None:
                raise Skip(f"the mask combines an arange by {op_name(n)}, not by a comparison")
            return _compare_indices(a, b, compare, (n.args[0], rhs), out, self.shift)
        for x, node in ((a, n.args[0]), (b, rhs)):
            if isinstance(x, Diag) and x.cuts:
                _check_trailing(node, out)
        return self._cast(n, combine([_as_diag(a), _as_diag(b)], fn))

    def _arith(self, n: fx.Node, name: str) -> Any:
        if n.kwargs.get("alpha", 1) != 1 or n.kwargs.get("rounding_mode") is not None:
            raise Skip("the mask uses add/sub with alpha or a rounding mode")
        raw = [n.args[0], n.args[1] if len(n.args) > 1 else n.kwargs.get("other")]
        evs = [example_value(x) if isinstance(x, fx.Node) else x for x in raw]
        sym = [isinstance(x, torch.SymInt) for x in evs]
        if any(sym) and not all(sym) and name in ("add", "sub"):
            # arange + length (a KV cache's query positions): an index with a symbolic offset.
            i = sym.index(False)
            idx = self(raw[i])
            if not isinstance(idx, Index) or (name == "sub" and i == 1):
                raise Skip("the mask does arithmetic with a length on something not an arange")
            shift = expr(evs[1 - i])
            return Index(idx.pos, idx.off + (shift if name == "add" else -shift))
        a, b = self(n.args[0]), self(n.args[1] if len(n.args) > 1 else n.kwargs.get("other"))
        if isinstance(a, Index) and isinstance(b, Index) and name == "sub":
            return _index_difference(a, b, (n.args[0], n.args[1]), example_value(n), self.shift)
        if isinstance(a, Offset) or isinstance(b, Offset):
            return _offset_arith(a, b, name)
        if isinstance(a, Index) or isinstance(b, Index):
            # arange + c, c + arange, arange - c: still an index with a shifted offset.
            idx, other = (a, b) if isinstance(a, Index) else (b, a)
            if (
                isinstance(other, Index)
                or name not in ("add", "sub")
                or (name == "sub" and idx is b)
            ):
                raise Skip("the mask does arithmetic on aranges other than adding a constant")
            arg = n.args[1] if idx is a else n.args[0]
            shift = expr(example_value(arg) if isinstance(arg, fx.Node) else arg)
            return Index(idx.pos, idx.off + (shift if name == "add" else -shift))
        return self._binary(n, ARITH[name])

    # -- ops with their own rules
    def _op_bitwise_not(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, (Index, Offset)):
            raise Skip("the mask inverts an arange")
        if example_value(n.args[0]).dtype == torch.bool:
            return combine([a], lambda v: not v)
        return self._cast(n, combine([a], operator.invert))

    def _op_logical_not(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, (Index, Offset)):
            raise Skip("the mask negates an arange")
        return self._cast(n, combine([a], lambda v: not v))

    def _op_neg(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, Index):
            raise Skip("the mask negates an arange")
        if isinstance(a, Offset):
            return a.negated()
        return self._cast(n, combine([a], operator.neg))

    def _op_abs(self, n: fx.Node) -> Any:
        a = self(n.args[0])
        if isinstance(a, Index):
            raise Skip("the mask takes abs of an arange")
        if isinstance(a, Offset):
            return a.abs()
        return self._cast(n, combine([a], abs))

    def _triangle(self, n: fx.Node, keep_lower: bool) -> Any:
        a = self(n.args[0])
        if isinstance(a, (Index, Offset)):
            raise Skip("the mask takes tril/triu of an arange")
        k = n.args[1] if len(n.args) > 1 else n.kwargs.get("diagonal", 0)
        k = example_value(k) if isinstance(k, fx.Node) else k
        # A diagonal Sk - Sq + c (`tril(tk - tq)`: a KV cache's causal mask) is c counted from
        # the bottom-right, as `_compare_indices` counts an offset of Sk - Sq plus a constant.
        rest = None if self.shift is None else sympy.simplify(expr(k) - self.shift)
        bottom_right = rest is not None and rest.is_Integer
        k = int(rest) if bottom_right else const_int(k, "tril/triu diagonal")
        # tril(k) keeps d <= k; triu(k) keeps d >= k; the rest becomes zero.
        keep = Diag((k + 1,), (True, False)) if keep_lower else Diag((k,), (False, True))
        keep = Diag(keep.cuts, keep.vals, bottom_right)
        zero = False if example_value(n).dtype == torch.bool else 0
        return self._cast(n, combine([a, keep], lambda v, kept: v if kept else zero))

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
        if example_value(n).dim() != 1:
            raise Skip("unexpected arange shape")
        start = example_value(start) if isinstance(start, fx.Node) else start
        if isinstance(start, float):
            if start != int(start):
                raise Skip("the mask uses an arange with a fractional start")
            start = int(start)
        return Index(-1, expr(start))

    def _gather(self, n: fx.Node) -> Any:
        """`src[i0, ..., ik]` with index tensors (what HF's vmap-free mask builders do: position
        ids or sequence ids indexed by batch, query and key aranges). A constant stays itself;
        an arange along src's last axis (the same in every batch row: `arange(N)` expanded
        to [B, N]) indexed in full, its last index an arange too, is that arange plus the
        offset. Anything else is refused."""
        src, index = self(n.args[0]), n.args[1]
        if isinstance(src, Diag) and not src.cuts:
            return src
        entries = index if isinstance(index, tuple) else (index,)
        if not (
            isinstance(src, Index)
            and src.pos == -1
            and len(entries) == example_value(n.args[0]).dim()
            and all(isinstance(i, fx.Node) for i in entries)
        ):
            raise Skip("the mask is indexed with tensors")
        last, out = self(entries[-1]), example_value(n)
        if not isinstance(last, Index) or sympy.simplify(last.off).is_nonnegative is not True:
            # (a negative index would wrap around to the other end)
            raise Skip("the mask is indexed with a tensor that is not an arange from 0 up")
        if example_value(entries[-1]).dim() > out.dim() or not known_eq(
            example_value(entries[-1]).shape[last.pos], out.shape[last.pos]
        ):
            raise Skip("the mask's index arange is broadcast along its own axis")
        return Index(last.pos, src.off + last.off)

    def _op_diff(self, n: fx.Node) -> Any:
        """`torch.diff(x, dim=-1, prepend=p)` of an arange along its axis (all ones when p is the
        arange's first value minus one, as HF's packed-sequence check writes it, or absent) or
        of a constant (all zeros when p is that constant, or absent)."""
        args = list(n.args) + [None] * 5
        order = n.kwargs.get("n", args[1] if args[1] is not None else 1)
        dim = n.kwargs.get("dim", args[2] if args[2] is not None else -1)
        prepend = n.kwargs.get("prepend", args[3])
        append = n.kwargs.get("append", args[4])
        x, rank = self(n.args[0]), example_value(n.args[0]).dim()
        if order != 1 or append is not None or not isinstance(dim, int):
            raise Skip("the mask uses torch.diff other than once, with a prepend, along a dim")
        axis = dim - rank if dim >= 0 else dim
        first = None if prepend is None else self(prepend)
        if isinstance(first, Index) and first.pos == axis:
            # a one-element slice of an arange along the axis: its value is the offset
            one = known_eq(example_value(prepend).shape[axis], 1)
            first = first.off if one else None
        elif isinstance(first, Diag) and not first.cuts and isinstance(first.vals[0], int):
            first = expr(first.vals[0])
        else:
            first = None
        if isinstance(x, Index) and x.pos == axis:
            step, start = 1, x.off
        elif isinstance(x, Diag) and not x.cuts and isinstance(x.vals[0], int):
            step, start = 0, expr(x.vals[0])
        else:
            raise Skip("the mask takes torch.diff of something not an arange or a constant")
        if prepend is not None and (first is None or sympy.simplify(start - first - step) != 0):
            raise Skip("the mask's torch.diff prepends a value that breaks the steps")
        return self._cast(n, const(step))

    def _op_cumsum(self, n: fx.Node) -> Any:
        """A cumulative sum of zeros (HF's sequence ids of an unpacked batch) is zeros."""
        x = self(n.args[0])
        if isinstance(x, Diag) and not x.cuts and not x.vals[0]:
            return self._cast(n, const(0))
        raise Skip("the mask takes a cumulative sum of something other than zeros")

    def _op_masked_fill(self, n: fx.Node) -> Any:
        x, mask = self(n.args[0]), self(n.args[1])
        value = self(n.args[2] if len(n.args) > 2 else n.kwargs.get("value"))
        if any(isinstance(t, (Index, Offset)) for t in (x, mask, value)):
            raise Skip("the mask fills an arange")
        for node, part in zip(n.args[:2], (x, mask), strict=True):
            _check_trailing_diag(node, part, example_value(n))
        return self._cast(
            n,
            combine([_as_diag(x), _as_diag(mask), _as_diag(value)], lambda a, m, f: f if m else a),
        )

    def _op_tensor(self, n: fx.Node) -> Any:
        """`torch.tensor(c)` of a Python number: a constant (transformers 5.17's mask builders
        spell their zero `torch.tensor(0.0)` in `where(causal, zero, finfo.min)`)."""
        value = n.args[0] if n.args else n.kwargs.get("data")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Skip("the mask makes a tensor of something other than one number")
        return self._cast(n, const(value))

    _op_scalar_tensor = _op_tensor

    def _op_where(self, n: fx.Node) -> Any:
        if len(n.args) != 3:
            raise Skip("the mask uses torch.where with one argument")
        parts = [self(a) for a in n.args]
        if any(isinstance(t, (Index, Offset)) for t in parts):
            raise Skip("the mask selects from an arange")
        for node, part in zip(n.args, parts, strict=True):
            _check_trailing_diag(node, part, example_value(n))
        return self._cast(n, combine([_as_diag(p) for p in parts], lambda c, a, b: a if c else b))


def _tensor_index(index: Any) -> bool:
    """Whether a getitem index holds a tensor (advanced indexing)."""
    entries = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(i, fx.Node) and isinstance(example_value(i), torch.Tensor) for i in entries
    )


def _as_diag(x: Any) -> Diag:
    return x if isinstance(x, Diag) else const(x)


def _index_difference(a: Index, b: Index, nodes: tuple, out: torch.Tensor, shift: Any) -> Offset:
    """`a - b` of a row and a column arange (in either order) as an `Offset`: col + o2 - (row +
    o1) = d + (o2 - o1), its negation for row - col; counted from the bottom-right, as
    `_compare_indices` does, when o1 - o2 is Sk - Sq plus a constant."""
    if out.dim() < 2:
        raise Skip("the mask subtracts two aranges along one axis")
    for idx, node in zip((a, b), nodes, strict=True):
        if not known_eq(example_value(node).shape[idx.pos], out.shape[idx.pos]):
            raise Skip("an arange in the mask is broadcast along its own axis")
    if {a.pos, b.pos} != {-2, -1}:
        raise Skip("the mask subtracts aranges that are not its row and column indices")
    row, col = (a, b) if a.pos == -2 else (b, a)
    rest = None if shift is None else sympy.simplify(row.off - col.off - shift)
    if rest is not None and rest.is_Integer:
        diff = Offset(-int(rest), bottom_right=True)  # col - row = d' - rest
    else:
        diff = Offset(const_int(col.off - row.off, "arange offset"))
    return diff if a is col else diff.negated()


def _offset_and_number(a: Any, b: Any, does: str) -> tuple[Offset, Any]:
    """(the `Offset`, the number) of a binary op's two operands, one of them an `Offset` and
    the other a number (or a constant pattern); Skip otherwise, saying what the mask `does`."""
    off, c = (a, b) if isinstance(a, Offset) else (b, a)
    if isinstance(c, Diag) and not c.cuts:
        c = c.vals[0]
    if isinstance(c, (Offset, Diag, Index)):
        what = {Offset: "another key - query offset", Diag: "a pattern", Index: "an arange"}
        raise Skip(f"the mask {does} a key - query offset and {what[type(c)]}")
    return off, c


def _offset_arith(a: Any, b: Any, name: str) -> Offset:
    """An `Offset` plus, minus or subtracted from an integer constant."""
    off, c = _offset_and_number(a, b, "does arithmetic on")
    if name == "add":
        return off.plus(c)
    if name == "sub":
        return off.plus(-c) if off is a else off.negated().plus(c)
    if name == "rsub":  # rsub(a, b) = b - a
        return off.negated().plus(c) if off is a else off.plus(-c)
    raise Skip(f"the mask applies {name} to a key - query offset")


def _check_trailing_diag(node: Any, part: Any, out: torch.Tensor) -> None:
    """`_check_trailing` for an operand whose pattern varies with d; a constant (a 0-d
    `zeros(())` the mask selects, say) is the same wherever it is broadcast."""
    if isinstance(part, Diag) and not part.cuts:
        return
    _check_trailing(node, out)


def _check_trailing(node: Any, out: torch.Tensor) -> None:
    """A diagonal operand must not be broadcast along its own rows or columns."""
    if not isinstance(node, fx.Node):
        return
    src = example_value(node)
    if not isinstance(src, torch.Tensor) or src.dim() < 2 or out.dim() < 2:
        raise Skip("a diagonal mask pattern lost its two trailing dims")
    if not (known_eq(src.shape[-2], out.shape[-2]) and known_eq(src.shape[-1], out.shape[-1])):
        raise Skip("a diagonal mask pattern is broadcast along its rows or columns")


def _compare_indices(
    a: Index, b: Index, op: str, nodes: tuple, out: torch.Tensor, shift: Any = None
) -> Diag:
    """row_index + o1 OP col_index + o2 as a function of d = col - row, or of the bottom-right
    d' = d - shift when o1 - o2 is `shift` (Sk - Sq) plus a constant."""
    if out.dim() < 2:
        raise Skip("the mask compares two aranges along one axis")
    for idx, node in ((a, nodes[0]), (b, nodes[1])):
        src = example_value(node)
        if not known_eq(src.shape[idx.pos], out.shape[idx.pos]):
            raise Skip("an arange in the mask is broadcast along its own axis")
    if {a.pos, b.pos} != {-2, -1}:
        raise Skip("the mask compares aranges that are not its row and column indices")
    if a.pos == -1:  # put the row index on the left: col OP row == row OP' col
        a, b = b, a
        op = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}.get(op, op)
    # row + o1 OP col + o2  <=>  c OP d with c = o1 - o2, d = col - row.
    # row + o1 OP col + o2 with o1 - o2 = (Sk - Sq) + c  <=>  c OP d' (d' = d - (Sk - Sq)).
    # With static lengths both readings hold; lengths that may differ count from bottom-right.
    rest = None if shift is None else sympy.simplify(a.off - b.off - shift)
    if rest is not None and rest.is_Integer:
        c, bottom_right = int(rest), True
    else:
        c, bottom_right = const_int(a.off - b.off, "arange offset"), False
    inside = {
        "ge": Diag((c + 1,), (True, False)),  # d <= c
        "gt": Diag((c,), (True, False)),  # d < c
        "le": Diag((c,), (False, True)),  # d >= c
        "lt": Diag((c + 1,), (False, True)),  # d > c
        "eq": Diag((c, c + 1), (False, True, False)),
        "ne": Diag((c, c + 1), (True, False, True)),
    }
    got = inside[op]
    return Diag(got.cuts, got.vals, bottom_right)


_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def _index_bound(a: Any, b: Any, op: str) -> Diag:
    """An arange compared with a number, `idx OP c` (or `c OP idx`), as a constant pattern when
    it holds for every element at every length: the arange's values are off, off + 1, ... (as
    many as the axis is long, any length), so only a lower bound can hold throughout, `idx >= c`
    when off >= c and `idx > c` when off > c. HF's bidirectional masks are built so
    (`masking_utils.and_masks` of `q_idx >= 0` and the padding mask indexed per key): the
    comparison keeps every row, and the mask is the padding alone. Skip for any other
    comparison (one that depends on the length, or on a padding length: not diagonal)."""
    if isinstance(b, Index):
        a, b, op = b, a, _SWAPPED[op]
    if isinstance(b, Diag) and not b.cuts:
        b = b.vals[0]
    if isinstance(b, bool) or not isinstance(b, (int, float)):
        raise Skip(
            "the mask compares an arange with something other than another arange or a "
            "constant (e.g. a padding length); only row/column index comparisons are diagonal"
        )
    if op in ("ge", "gt"):
        margin = sympy.simplify(a.off - sympy.nsimplify(b))
        if (margin.is_nonnegative if op == "ge" else margin.is_positive) is True:
            return const(True)
    raise Skip(
        f"the mask compares an arange with the constant {b!r} ({op}), which is not proven true "
        "of every element at every length"
    )


def _from_tensor(t: torch.Tensor, name: str) -> Diag:
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
        if not same(v, vals[-1]):
            cuts.append(k - (r - 1))
            vals.append(v)
    return Diag(tuple(cuts), tuple(vals))
