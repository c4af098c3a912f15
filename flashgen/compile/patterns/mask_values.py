"""What the causal-mask proof (`masks`) works on: the real tensors a mask may read (`Values`),
the abstract values of a mask's nodes as functions of the diagonal offset (`Diag`, `Index`),
the tables of ops it understands, and the in-place-change check.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch import fx

from .core import Skip


class Values:
    """Real tensors for module state (buffers, tensor attributes): what a mask may read.

    A graph's example inputs are usually the real tensors, but not always: under DDP, Dynamo's
    DDP optimizer splits the graph at gradient-bucket boundaries and compiles each piece with
    fake example inputs. A buffer lifted into a piece's inputs still carries Dynamo's record of
    where it came from (`grapharg`), whose example is the module's real buffer; that is the
    value the mask is read from then (`_real_state`). Anything else fake stays unproven."""

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
        if isinstance(obj, torch.nn.Parameter):  # (`is_buffer_placeholder`: learned values)
            raise Skip(f"{n.name} is a parameter: nothing is proven from its learned values")
        if isinstance(obj, torch._subclasses.FakeTensor):
            real = _real_state(n, obj)
            if real is None:
                raise Skip(f"{n.name} has no real value at compile time")
            obj = real
        return obj


def _real_state(n: Any, fake: torch.Tensor) -> torch.Tensor | None:
    """The real tensor behind placeholder `n` whose example is `fake`, when `n` is module state
    (`is_buffer_placeholder`) and Dynamo's record of it still holds a real tensor of the same
    shape and dtype; else None. Used for the pieces of a DDP-split graph (see `Values`)."""
    if n.op != "placeholder" or not is_buffer_placeholder(n):
        return None
    try:
        real = n.meta["grapharg"].example
    except (KeyError, AttributeError, AssertionError):  # no record, or the tensor is gone
        return None
    if (
        not isinstance(real, torch.Tensor)
        or isinstance(real, torch._subclasses.FakeTensor)
        or real.shape != fake.shape
        or real.dtype != fake.dtype
    ):
        return None
    return real


def is_buffer_placeholder(n: Any) -> bool:
    """True for module state other than parameters (buffers, tensor attributes, globals) that
    Dynamo lifted into graph inputs; False for forward() arguments, which may differ on every
    call, and for parameters: learned values change under training (and `load_state_dict`)
    without a recompile, so nothing is proven from them (HF LeViT's attention biases start as
    zeros: read as zeros, they were dropped with their gradient until session 65).

    Dynamo names a forward() argument `L['mask']` (or `L['args'][0]`, `L['kwargs']['mask']`);
    state is reached through an attribute (`L['self']._buffers['bias']`) or is a global.
    """
    if is_parameter_placeholder(n):
        return False
    name = _source_name(n)
    if not name:
        return False
    if name.startswith("G["):
        return True
    return bool(re.fullmatch(r"L\[[^\]]+\](\[[^\]]+\])*", name)) is False


def is_parameter_placeholder(n: Any) -> bool:
    """True for a graph input that is an nn.Parameter (Dynamo's `._parameters['name']`)."""
    arg = n.meta.get("grapharg") if isinstance(n, fx.Node) else None
    if arg is None:
        return False
    try:
        if isinstance(arg.example, torch.nn.Parameter):
            return True
    except (AttributeError, AssertionError):  # the tensor is gone
        pass
    return "._parameters[" in _source_name(n)


def _source_name(n: Any) -> str:
    """Dynamo's name for where a graph input came from (`L['x']`, `L['self']._buffers['b']`),
    or "" where it kept none."""
    arg = n.meta.get("grapharg") if isinstance(n, fx.Node) else None
    source = getattr(arg, "source", None) if arg is not None else None
    name = getattr(source, "name", "") if source is not None else ""
    name = name() if callable(name) else name
    return name if isinstance(name, str) else ""


# ----------------------------------------------------------------------------- abstract values


def same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


@dataclass(frozen=True)
class Diag:
    """A mask whose value depends only on d = j - i over its last two dims (i: row, j: column):
    vals[0] for d < cuts[0], vals[k] for cuts[k-1] <= d < cuts[k], vals[-1] for d >= cuts[-1].
    With no cuts it is a constant, and then its layout does not matter.

    `bottom_right`: d is counted from the bottom-right diagonal instead, d = j - i - (Sk - Sq)
    for the query and key lengths Sq, Sk the mask is proven against (`masks.prove_causal`): what
    a KV cache's mask encodes, whose query positions are arange(Sq) + (Sk - Sq)."""

    cuts: tuple[int, ...]
    vals: tuple[Any, ...]
    bottom_right: bool = False

    def at(self, d: float) -> Any:
        return self.vals[bisect.bisect_right(self.cuts, d)]

    def regions(self) -> list[tuple[float, float, Any]]:
        """(first d, last d, value) for each constant region, ends may be -inf/inf."""
        edges = [-math.inf, *self.cuts, math.inf]
        return [(edges[k], edges[k + 1] - 1, v) for k, v in enumerate(self.vals)]

    def shifted(self, s: int) -> Diag:
        """f(d + s): the pattern seen through a slice whose column start is s past its row start."""
        return Diag(tuple(c - s for c in self.cuts), self.vals, self.bottom_right)


def const(v: Any) -> Diag:
    return Diag((), (v,))


def combine(parts: list[Diag], fn: Any) -> Diag:
    """Pointwise fn over several patterns (merging their breakpoints), normalised."""
    anchors = {p.bottom_right for p in parts if p.cuts}
    if len(anchors) > 1:
        raise Skip("the mask mixes diagonals counted from the top-left and the bottom-right")
    bottom_right = anchors == {True}
    cuts = sorted({c for p in parts for c in p.cuts})
    reps = [cuts[0] - 1] + cuts if cuts else [0]
    try:
        vals = [fn(*(p.at(r) for p in parts)) for r in reps]
    except (ArithmeticError, TypeError, ValueError) as e:
        raise Skip(f"could not follow the mask's values ({type(e).__name__}: {e})") from e
    out_cuts: list[int] = []
    out_vals = [vals[0]]
    for c, v in zip(cuts, vals[1:], strict=True):
        if not same(v, out_vals[-1]):
            out_cuts.append(c)
            out_vals.append(v)
    return Diag(tuple(out_cuts), tuple(out_vals), bottom_right and bool(out_cuts))


@dataclass(frozen=True)
class Index:
    """An arange: its value at each element is the element's index along axis `pos` (counted
    from the end, -1 the last) plus `off` (a sympy integer expression)."""

    pos: int
    off: Any


@dataclass(frozen=True)
class Offset:
    """The key - query offset itself as a mask's value, before a comparison with a constant
    turns it into a `Diag`: mult * g(d) + post with g(d) = |d + off| if `absolute`, else d +
    off (d = j - i over the last two dims, counted from the bottom-right as in `Diag` when
    `bottom_right`). What `j - i` or `(i - j).abs()` of a column and a row arange gives (a
    two-sided band written `(j - i).abs() < w`)."""

    off: int = 0
    absolute: bool = False
    mult: int = 1  # +1 or -1
    post: int = 0
    bottom_right: bool = False

    def at(self, d: int) -> int:
        g = d + self.off
        return self.mult * (abs(g) if self.absolute else g) + self.post

    def plus(self, c: Any) -> Offset:
        if isinstance(c, bool) or not isinstance(c, int):
            raise Skip(f"the mask adds {c!r} to a key - query offset (an integer is followed)")
        return dataclasses.replace(self, post=self.post + c)

    def negated(self) -> Offset:
        return dataclasses.replace(self, mult=-self.mult, post=-self.post)

    def abs(self) -> Offset:
        if self.absolute:
            raise Skip("the mask takes abs of an absolute key - query offset")
        # mult (d + off) + post = mult (d + off + mult post): |.| = |d + off + mult post|
        return Offset(self.off + self.mult * self.post, True, 1, 0, self.bottom_right)

    def shifted(self, s: int) -> Offset:
        """f(d + s), as `Diag.shifted`."""
        return dataclasses.replace(self, off=self.off + s)

    def compare(self, fn: Any, c: Any, swapped: bool) -> Diag:
        """The pattern of `self fn c` (`c fn self` when `swapped`) for a number c: the truth
        changes only next to where mult * g(d) + post crosses c, or at g's kink."""
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
            raise Skip(f"the mask compares a key - query offset with {c!r}")
        t = (c - self.post) * self.mult  # g(d) = t
        roots = [-self.off + t, -self.off - t, -self.off]
        cuts = sorted({math.floor(r) + k for r in roots for k in (-1, 0, 1, 2)})

        def holds(d: int) -> bool:
            v = self.at(d)
            return bool(fn(c, v) if swapped else fn(v, c))

        vals = [holds(cuts[0] - 1), *(holds(x) for x in cuts)]
        raw = Diag(tuple(cuts), tuple(vals), self.bottom_right)
        return combine([raw], bool)


_Abstract = Diag | Index | Offset


def expr(x: Any) -> Any:
    """A sympy integer expression for an int / SymInt (a size or a slice start)."""
    if isinstance(x, bool):
        raise Skip("a bool where a size was expected")
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, torch.SymInt):
        return x.node.expr
    raise Skip(f"the mask uses {x!r} where an integer was expected")


def const_int(x: Any, what: str) -> int:
    """x as a Python int if it is the same constant for every length, else Skip."""
    e = sympy.simplify(expr(x)) if not isinstance(x, sympy.Basic) else sympy.simplify(x)
    if e.is_Integer:
        return int(e)
    raise Skip(
        f"the mask's {what} depends on the sequence length ({e}); only constant offsets can be "
        "proven for every length"
    )


# ----------------------------------------------------------------------------- op tables

CMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
        "gt": operator.gt, "ge": operator.ge}  # fmt: skip
LOGIC = {
    "logical_and": lambda a, b: bool(a) and bool(b),
    "logical_or": lambda a, b: bool(a) or bool(b),
    "logical_xor": lambda a, b: bool(a) != bool(b),
    "and_": operator.and_,
    "or_": operator.or_,
    "xor": operator.xor,
}
ARITH = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
          "truediv": operator.truediv, "rsub": lambda a, b: b - a}  # fmt: skip
CASTS = {"bool", "float", "half", "double", "int", "long", "bfloat16", "to", "type", "type_as",
          "contiguous", "clone", "detach"}  # fmt: skip
CREATE = {"ones": 1, "zeros": 0, "ones_like": 1, "zeros_like": 0, "new_ones": 1, "new_zeros": 0}
FULL = {"full": 1, "full_like": 1, "new_full": 2}  # index of the fill value argument
# (a squeeze drops size-1 axes only: followed as a view that does, `mask_views._axis_map`)
VIEWS = {"view", "reshape", "unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to",
         "getitem"}  # fmt: skip
_ALIASES = {"greater_equal": "ge", "greater": "gt", "less_equal": "le", "less": "lt",
            "not_equal": "ne", "invert": "bitwise_not", "neg": "neg", "multiply": "mul",
            "subtract": "sub", "div": "truediv", "true_divide": "truediv", "divide": "truediv",
            "bitwise_and": "and_", "bitwise_or": "or_", "bitwise_xor": "xor", "and": "and_",
            "or": "or_"}  # fmt: skip
_TORCH_NAMESPACES = (torch, torch.Tensor, torch.special)
_INPLACE_OPERATORS = {operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                      operator.ifloordiv, operator.imod, operator.ipow, operator.iand,
                      operator.ior, operator.ixor, operator.ilshift, operator.irshift}  # fmt: skip


def op_name(n: fx.Node) -> str | None:
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


def check_not_mutated(n: fx.Node) -> None:
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
            if u.args and u.args[0] is x and op_name(u) in VIEWS | {"transpose", "permute"}:
                work.append(u)
