"""Find attention in a Dynamo-level FX graph and replace it with the flashgen op.

Why walk the graph instead of `subgraph_rewriter.replace_pattern`: Dynamo keeps the user's own
spelling (`torch.matmul` vs `@`, `F.softmax` vs `Tensor.softmax`, `* s` vs `/ d`, masks from
buffers or built inline), and one FX pattern matches one spelling only. Starting from every
`softmax` node and walking up to the scores product and down to the value product covers the
spellings with one matcher, and lets each step say in words why a site was not taken.

Every site is CHECKED before it is rewritten: the scale must be a compile-time constant (a
Python number, or an expression of the head dim, which is then guarded), a mask must be proven
causal by evaluating it on the real buffers, shapes and dtypes must be ones the kernels take.
Anything else is left as it is (Inductor compiles it) and reported with a reason.

Masks read from module buffers are checked once, at compile time: mutating such a buffer in
place afterwards is not seen (Dynamo does not guard on buffer values).
"""

from __future__ import annotations

import collections
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

#: Hit counters, process-wide: "<kind>.found", "<kind>.replaced", "<kind>.skipped".
counters: collections.Counter[str] = collections.Counter()

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

_SDPA = {torch._C._nn.scaled_dot_product_attention, F.scaled_dot_product_attention}
_SOFTMAX_FNS = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.special.softmax}
_MATMUL_FNS = {torch.matmul, operator.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.bmm}
_EINSUM_FNS = {torch.einsum, torch.functional.einsum}
_MUL_FNS = {operator.mul, torch.mul, torch.Tensor.mul, operator.imul}
_DIV_FNS = {operator.truediv, torch.div, torch.true_divide, torch.Tensor.div, operator.itruediv}
_ADD_FNS = {operator.add, torch.add, torch.Tensor.add, operator.iadd, operator.sub, torch.sub}
_MASKED_FILL_FNS = {torch.masked_fill, torch.Tensor.masked_fill}
_DROPOUT_FNS = {F.dropout, torch.dropout, torch.nn.functional.dropout}
_CAST_METHODS = {"float", "to", "type", "type_as", "half", "bfloat16", "double"}
_METADATA_METHODS = {"size", "dim", "numel", "stride", "get_device"}
_METADATA_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda"}
_NEAR_NEG_INF = -65504.0  # finfo(float16).min: any fill value at or below it acts as -inf


class Skip(Exception):
    """A site that looks like attention but must not be rewritten; the message says why."""


@dataclass
class Site:
    """One attention site in one graph, as reported by `flashgen.explain` and the backend log."""

    kind: str
    location: str
    replaced: bool = False
    reason: str = ""
    causal: bool | None = None
    scale: float | None = None
    gqa_group: int = 1
    shape: str = ""
    graph: int = 0


@dataclass
class Match:
    """What the rewrite needs: operands, flags, and the node whose value the op replaces."""

    site: Site
    q: fx.Node
    k: fx.Node
    v: fx.Node
    out: fx.Node
    causal: bool
    scale_terms: list[Any]
    interior: list[fx.Node] = field(default_factory=list)
    three_d: bool = False
    scale: float = 0.0
    contiguous: list[bool] = field(default_factory=lambda: [False, False, False])
    mha: dict[str, Any] | None = None  # nn.MultiheadAttention: projections to rebuild


# ----------------------------------------------------------------------------- node helpers


def _is_fn(n: Any, fns: set, methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(n, fx.Node):
        return False
    if n.op == "call_function":
        return n.target in fns
    return n.op == "call_method" and n.target in methods


def _arg(n: Any, i: int, name: str, default: Any = None) -> Any:
    """Argument `name` (positional index i, counting the tensor self for methods)."""
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _ev(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, fx.Node) else n


def _is_tensor_node(n: Any) -> bool:
    return isinstance(_ev(n), torch.Tensor)


def _hint(x: Any) -> int:
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        if hint is None:
            raise Skip("a size is data-dependent (unbacked); flashgen needs a known shape")
        return int(hint)
    return int(x)


def _known_eq(a: Any, b: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def location(n: Any) -> str:
    """`file.py:LINE in fn` of the user's source line that made node n, from Dynamo's meta."""
    trace = n.meta.get("stack_trace") or ""
    hits = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    if not hits:
        return n.name
    # The innermost frame of the user's own code, not torch.nn's (e.g. nn.MultiheadAttention).
    own = [h for h in hits if "/torch/" not in h[0]]
    path, line, fn = (own or hits)[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {fn}"


def _single_user(n: Any, what: str) -> None:
    if len(n.users) != 1:
        raise Skip(
            f"the {what} ({n.name}) is also used outside the attention; flashgen never "
            "materialises the attention matrix (e.g. returning attention weights)"
        )


# ----------------------------------------------------------------------------- constants


def _head_dim_symbols(*tensors: torch.Tensor) -> set:
    syms: set = set()
    for t in tensors:
        d = t.shape[-1]
        if isinstance(d, torch.SymInt):
            syms |= d.node.expr.free_symbols
    return syms


def const_value(x: Any, allowed_symbols: set) -> float:
    """A compile-time number for x, guarding on the head dim if x is an expression of it.

    Dynamo keeps `1/math.sqrt(k.size(-1))` symbolic under dynamic shapes; evaluating it with a
    guard specialises only the head dim (which the kernel needs fixed anyway), so a new sequence
    length still reuses the graph. Values read from tensors (e.g. a float attribute that
    `dynamic=True` turned into an input) cannot be guarded from here and are refused.
    """
    if isinstance(x, bool):
        raise Skip("scale is a bool")
    if isinstance(x, (int, float)):
        return float(x)
    val = _ev(x)
    if isinstance(val, (torch.SymInt, torch.SymFloat)):
        free = val.node.expr.free_symbols
        if not free <= allowed_symbols:
            raise Skip(
                "scale depends on a dynamic size other than the head dim; use a constant scale"
            )
        return float(val)
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        return float(val)
    raise Skip(
        "scale is not a compile-time constant (it is computed from a tensor at run time; with "
        "dynamic=True a float module attribute becomes a tensor input: use a literal or "
        "math.sqrt of the head dim)"
    )


def _scalar_operand(n: Any, chain: Any) -> Any | None:
    """For mul/div nodes: the operand that is not `chain`, if it is not a tensor."""
    others = [a for a in n.args[:2] if a is not chain]
    if len(others) != 1 or (len(n.args) > 2 or n.kwargs):
        return None
    other = others[0]
    if isinstance(other, fx.Node) and _is_tensor_node(other):
        if _ev(other).dim() == 0:
            raise Skip(
                "scale is a 0-d tensor, not a compile-time constant (with dynamic=True a float "
                "module attribute becomes a tensor input: use a literal or math.sqrt of the head dim)"
            )
        return None
    return other


def peel_one_scale(n: Any, terms: list[Any]) -> Any:
    """x if n is `x * c`, `c * x` or `x / c` (appending (c, +-1) to terms), else None."""
    if _is_fn(n, _MUL_FNS, ("mul", "mul_")):
        for x in n.args[:2]:
            if isinstance(x, fx.Node) and _is_tensor_node(x):
                c = _scalar_operand(n, x)
                if c is not None:
                    terms.append((c, 1))
                    return x
        return None
    if _is_fn(n, _DIV_FNS, ("div", "div_", "true_divide")) and isinstance(n.args[0], fx.Node):
        if "rounding_mode" in n.kwargs:
            return None
        c = _scalar_operand(n, n.args[0])
        if c is None:
            return None
        terms.append((c, -1))
        return n.args[0]
    return None


def peel_scale(n: Any, terms: list[Any]) -> Any:
    """Strip every constant factor from n (q or k side); return the bare tensor node."""
    while isinstance(n, fx.Node):
        x = peel_one_scale(n, terms)
        if x is None:
            return n
        n = x
    return n


# ----------------------------------------------------------------------------- products


def _transpose_base(b: Any) -> Any:
    """x if b is x with its last two dims swapped (transpose/mT/permute), else None."""
    if not isinstance(b, fx.Node):
        return None
    nd = _ev(b).dim() if _is_tensor_node(b) else None
    if nd is None:
        return None
    if _is_fn(b, {torch.transpose, torch.Tensor.transpose}, ("transpose", "swapaxes")):
        dims = {_arg(b, 1, "dim0") % nd, _arg(b, 2, "dim1") % nd}
        return b.args[0] if dims == {nd - 2, nd - 1} else None
    if b.op == "call_function" and b.target is getattr and b.args[1] == "mT":
        return b.args[0]
    if _is_fn(b, {torch.permute}, ("permute",)):
        perm = b.args[1] if isinstance(b.args[1], (tuple, list)) else b.args[1:]
        want = list(range(nd - 2)) + [nd - 1, nd - 2]
        return b.args[0] if [p % nd for p in perm] == want else None
    if _is_fn(b, set(), ("t",)) and nd == 2:
        return b.args[0]
    return None


def _einsum_parts(n: Any) -> tuple[list[str], list[str], list[str], Any, Any] | None:
    eq = n.args[0]
    ops = n.args[1:]
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = ops[0]
    if not isinstance(eq, str) or len(ops) != 2 or "->" not in eq:
        return None
    lhs, out = eq.replace(" ", "").split("->")
    parts = lhs.split(",")
    if len(parts) != 2:
        return None

    def toks(s: str) -> list[str]:
        return ["..." if t == "..." else t for t in re.findall(r"\.\.\.|[a-zA-Z]", s)]

    return toks(parts[0]), toks(parts[1]), toks(out), ops[0], ops[1]


def split_scores_product(s: Any) -> tuple[str, Any, Any, bool] | None:
    """(kind, q_side, k_side, k_is_transposed_already) for S = Q K^T, else None."""
    if _is_fn(s, _MATMUL_FNS, ("matmul", "bmm")):
        kind = "bmm" if s.target in (torch.bmm, torch.Tensor.bmm, "bmm") else "matmul"
        return kind, s.args[0], s.args[1], True
    if _is_fn(s, _EINSUM_FNS):
        parts = _einsum_parts(s)
        if parts is None:
            return None
        a, b, o, x, y = parts
        if len(a) < 2 or len(a) != len(b) or len(o) != len(a) or a[:-2] != b[:-2] != o[:-2]:
            return None
        if a[:-2] != o[:-2]:
            return None
        i, c = a[-2], a[-1]
        if b[-1] == c and o[-2:] == [i, b[-2]] and len({i, c, b[-2]}) == 3:
            return "einsum", x, y, False
        if b[-2] == c and o[-2:] == [i, b[-1]] and len({i, c, b[-1]}) == 3:
            return "einsum", x, y, True
    return None


def split_value_product(o: Any, p: Any) -> Any:
    """V if node o computes P @ V with P = p, else None."""
    if _is_fn(o, _MATMUL_FNS, ("matmul", "bmm")):
        return o.args[1] if o.args[0] is p else None
    if _is_fn(o, _EINSUM_FNS):
        parts = _einsum_parts(o)
        if parts is None:
            return None
        a, b, out, x, y = parts
        if x is not p or len(a) < 2 or len(a) != len(b) or len(out) != len(a):
            return None
        if a[:-2] == b[:-2] == out[:-2] and a[-1] == b[-2] and out[-2:] == [a[-2], b[-1]]:
            return y
    return None


# ----------------------------------------------------------------------------- GQA


def _repeat_base(x: Any) -> tuple[Any, int]:
    """(kv, n) if x is kv with each head repeated n times consecutively (dim 1), else (x, 1)."""
    if _is_fn(x, {torch.repeat_interleave, torch.Tensor.repeat_interleave}, ("repeat_interleave",)):
        reps, dim = _arg(x, 1, "repeats"), _arg(x, 2, "dim")
        if (
            isinstance(reps, int)
            and not isinstance(reps, bool)
            and dim in (1, -3)
            and _ev(x.args[0]).dim() == 4
            and "output_size" not in x.kwargs
        ):
            return x.args[0], reps
    if _is_fn(x, {torch.reshape}, ("reshape", "view")):
        e = x.args[0]
        if _is_fn(e, set(), ("expand",)):
            u = e.args[0]
            ue = _ev(u)
            if ue is not None and ue.dim() == 5:
                base = None
                if _is_fn(u, {torch.unsqueeze}, ("unsqueeze",)) and _arg(u, 1, "dim") in (2, -3):
                    base = u.args[0]
                elif u.op == "call_function" and u.target is operator.getitem:
                    idx = u.args[1]
                    if isinstance(idx, tuple) and len(idx) >= 3 and idx[2] is None:
                        full = slice(None, None, None)
                        if all(s == full for s in idx[:2]) and all(s == full for s in idx[3:]):
                            base = u.args[0]
                ee, xe = _ev(e), _ev(x)
                if base is not None and xe is not None and xe.dim() == 4:
                    n = ee.shape[2]
                    if isinstance(n, int) and _known_eq(xe.shape[1], ee.shape[1] * n):
                        return base, n
    return x, 1


# ----------------------------------------------------------------------------- masks


class _Values:
    """Real values for placeholders/get_attrs: what a mask evaluation may read."""

    def __init__(self, gm: fx.GraphModule, example_inputs: list[Any]) -> None:
        self.gm = gm
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.by_node = dict(zip(phs, example_inputs, strict=False))

    def leaf(self, n: Any) -> Any:
        if n.op == "get_attr":
            obj: Any = self.gm
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
            return obj
        if n not in self.by_node:
            raise Skip(f"no example value for {n.name}")
        val = self.by_node[n]
        if isinstance(val, torch.SymInt):
            return _hint(val)
        if isinstance(val, torch.Tensor) and isinstance(val, torch._subclasses.FakeTensor):
            raise Skip(f"{n.name} has no real value at compile time")
        return val


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


def _is_metadata(n: Any) -> bool:
    if n.op == "call_method" and n.target in _METADATA_METHODS:
        return True
    return (
        n.op == "call_function"
        and n.target is getattr
        and len(n.args) == 2
        and n.args[1] in _METADATA_ATTRS
    )


def _triangular(t: torch.Tensor) -> bool:
    """True if every trailing 2-D slice of t is lower-triangular or strictly upper (as bool)."""
    if t.dim() < 2:
        return False
    nz = t != 0
    r, c = nz.shape[-2:]
    lower = torch.ones(r, c, dtype=torch.bool, device=nz.device).tril()
    return bool((nz == lower).all()) or bool((nz == ~lower).all())


def eval_mask(mask: Any, values: _Values) -> torch.Tensor:
    """Evaluate the subgraph that builds `mask` on real values; refuse input-dependent masks.

    Leaves may be constants, sizes of any tensor, module buffers (which must themselves be
    triangular, so that a top-left slice for another sequence length stays causal), and
    tensors the graph creates (ones/arange/triu...). A mask read from a forward() argument may
    change on every call without a recompile, so it can never be proven causal.
    """
    order: list[fx.Node] = []
    seen: set[fx.Node] = set()

    def visit(n: Any) -> None:
        if n in seen:
            return
        seen.add(n)
        if n.op == "placeholder":
            val = values.leaf(n)
            if isinstance(val, torch.Tensor):
                if not _is_buffer_placeholder(n):
                    raise Skip(
                        f"the mask is read from the forward() input {n.name}; only masks from "
                        "module buffers or built inside forward() can be proven causal (for a "
                        "causal mask use is_causal=True / a tril buffer)"
                    )
                if not _triangular(val):
                    raise Skip(f"mask buffer {n.name} is not triangular, so it is not causal")
        elif n.op == "get_attr":
            val = values.leaf(n)
            if isinstance(val, torch.Tensor) and not _triangular(val):
                raise Skip(f"mask tensor {n.target} is not triangular, so it is not causal")
        elif not _is_metadata(n):
            for a in n.all_input_nodes:
                visit(a)
        order.append(n)

    visit(mask)
    env: dict[Any, Any] = {}
    n: Any
    for n in order:
        if n.op in ("placeholder", "get_attr"):
            env[n] = values.leaf(n)
            continue
        if _is_metadata(n):
            src: Any = n.args[0]
            obj = env[src] if src in env else values.leaf(src) if src.op == "placeholder" else None
            if obj is None:
                obj = _concrete_like(_ev(src))
            env[n] = (
                getattr(obj, n.args[1])
                if n.op == "call_function"
                else getattr(obj, n.target)(*fx.map_arg(n.args[1:], env.__getitem__), **n.kwargs)
            )
            continue
        args = fx.map_arg(n.args, env.__getitem__)
        kwargs = fx.map_arg(n.kwargs, env.__getitem__)
        try:
            if n.op == "call_function":
                env[n] = n.target(*args, **kwargs)
            elif n.op == "call_method":
                env[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
            else:
                raise Skip(f"mask uses {n.op} {n.target}, which flashgen cannot evaluate")
        except Skip:
            raise
        except Exception as e:  # any evaluation failure just means "not provably causal"
            raise Skip(f"could not evaluate the mask ({type(e).__name__}: {e})") from e
    out = env[mask]
    if not isinstance(out, torch.Tensor):
        raise Skip("the mask is not a tensor")
    return out


def _concrete_like(fake: Any) -> torch.Tensor:
    """A real empty tensor with the hinted shape of a fake one (for .size()/.device reads)."""
    if not isinstance(fake, torch.Tensor):
        raise Skip("could not find the tensor a mask size is read from")
    shape = [_hint(s) for s in fake.shape]
    return torch.empty(shape, dtype=fake.dtype, device="meta")


def is_causal_mask(mask: torch.Tensor, tq: int, tk: int, *, keep: bool) -> bool:
    """mask (broadcastable to [..., tq, tk]) is exactly the top-left causal pattern.

    keep=False: True marks masked-out entries (masked_fill); keep=True: True marks kept entries
    (SDPA boolean attn_mask); float masks are additive (0 kept, -inf masked).
    """
    if mask.dim() < 2 or tuple(mask.shape[-2:]) != (tq, tk):
        return False
    kept = torch.ones(tq, tk, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        got = mask if keep else ~mask
        return bool((got == kept).all())
    if mask.is_floating_point():
        ok_kept = (mask == 0) | ~kept
        ok_masked = (mask <= _NEAR_NEG_INF) | kept
        return bool(ok_kept.all()) and bool(ok_masked.all())
    return False


# ----------------------------------------------------------------------------- matchers


def _leads_to_product(n: Any) -> bool:
    while isinstance(n, fx.Node):
        if split_scores_product(n) is not None:
            return True
        if _is_float32_cast(n) or _is_fn(n, _MUL_FNS | _DIV_FNS, ("mul", "div")):
            ins = [a for a in n.args[:2] if isinstance(a, fx.Node) and _is_tensor_node(a)]
            n = ins[0] if len(ins) == 1 else None
            continue
        return False
    return False


def _is_softmax(n: Any) -> bool:
    return _is_fn(n, _SOFTMAX_FNS, ("softmax",))


def _is_float32_cast(n: Any) -> bool:
    """Casts an upcast may use; checked by dtype on the example values, not by spelling."""
    if not (n.op == "call_method" and n.target in _CAST_METHODS) and not (
        n.op == "call_function" and n.target in (torch.Tensor.float, torch.Tensor.to)
    ):
        return False
    src, dst = _ev(n.args[0]), _ev(n)
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
        return False
    return src.shape == dst.shape and src.device == dst.device and dst.is_floating_point()


def _softmax_dim_ok(n: Any) -> bool:
    dim = _arg(n, 1, "dim")
    nd = _ev(n).dim()
    return isinstance(dim, int) and dim % nd == nd - 1


def match_softmax(sm: Any, values: _Values) -> Match | None:
    """Walk up from a softmax to Q K^T and down to P V. None if this is not attention."""
    problems: list[str] = []
    interior: list[fx.Node] = [sm]
    terms: list[Any] = []
    masks: list[tuple[str, Any, Any]] = []
    x = sm.args[0] if sm.args else sm.kwargs.get("input")
    # Up: casts, masked_fill, scale and (refused) additive masks, in any order.
    while isinstance(x, fx.Node):
        if _is_float32_cast(x):
            nxt = x.args[0]
        elif _is_fn(x, _MASKED_FILL_FNS, ("masked_fill", "masked_fill_")):
            masks.append(("masked_fill", _arg(x, 1, "mask"), _arg(x, 2, "value")))
            nxt = x.args[0]
        elif _is_fn(x, _MUL_FNS | _DIV_FNS, ("mul", "div", "mul_", "div_")):
            try:
                got = peel_one_scale(x, terms)
            except Skip as e:
                problems.append(str(e))
                ins = [a for a in x.args[:2] if isinstance(a, fx.Node) and _leads_to_product(a)]
                got = ins[0] if ins else None
            if got is None:
                return None
            nxt = got
        elif _is_fn(x, _ADD_FNS, ("add", "add_")) and len(x.args) == 2 and not x.kwargs:
            tensors = [a for a in x.args[:2] if isinstance(a, fx.Node) and _is_tensor_node(a)]
            if len(tensors) != 2:
                return None
            nxt = tensors[1] if _leads_to_product(tensors[1]) else tensors[0]
            masks.append(("add", tensors[0] if nxt is tensors[1] else tensors[1], None))
        elif _is_fn(x, {torch.where}, ("where",)) and len(x.args) == 3 and not x.kwargs:
            cond, a, b = x.args
            if _leads_to_product(a) and not _is_tensor_node(b):
                nxt = a
                masks.append(("where_keep", cond, b))
            elif _leads_to_product(b) and not _is_tensor_node(a):
                nxt = b
                masks.append(("where_mask", cond, a))
            else:
                return None
        else:
            break
        interior.append(x)
        x = nxt
    if not isinstance(x, fx.Node):
        return None
    prod = split_scores_product(x)
    if prod is None:
        return None
    kind, q_side, k_side, transposed = prod
    interior.append(x)

    # Down: optional cast back, dropout, then P @ V.
    p = sm
    v = None
    while v is None:
        users = list(p.users)
        products = [(u, split_value_product(u, p)) for u in users]
        products = [(u, vv) for u, vv in products if vv is not None]
        if products:
            if len(users) != 1:
                problems.append(
                    "the attention probabilities are also used outside the attention (e.g. "
                    "returned as attention weights); flashgen never materialises them"
                )
            out, v = products[0]
            break
        if len(users) != 1:
            return None
        (u,) = users
        if _is_float32_cast(u):
            pass
        elif _is_fn(u, _DROPOUT_FNS, ("dropout",)):
            drop_p = _arg(u, 1, "p", 0.5)
            training = _arg(u, 2, "training" if u.target is not torch.dropout else "train", True)
            if training is not False and drop_p != 0:
                shown = "a run-time value" if isinstance(drop_p, fx.Node) else drop_p
                problems.append(
                    f"dropout p={shown} in training mode: flashgen kernels have no dropout; "
                    "call model.eval() or set the attention dropout to 0"
                )
        else:
            return None
        interior.append(u)
        p = u
    site = Site(kind=kind, location=location(sm))

    # Upstream side of the products: pre-applied scales, transposes, GQA repeats.
    for n in interior:
        if n is not sm and n is not x and n is not p and len(n.users) != 1:
            problems.append(
                f"an intermediate of the attention ({n.name}) is also used elsewhere; "
                "flashgen never materialises the attention matrix"
            )
            break
    if len(x.users) != 1:
        problems.append("the attention scores are also used outside the attention")
    q = peel_scale(q_side, terms) if isinstance(q_side, fx.Node) else q_side
    if transposed:
        kt = peel_scale(k_side, terms)
        k = _transpose_base(kt)
        if k is None:
            problems.append(
                "the key operand of Q @ K^T is not a transpose of the last two dims "
                "(k.transpose(-2, -1), k.mT, permute); left to Inductor"
            )
            k = kt
        k = peel_scale(k, terms)
    else:
        k = peel_scale(k_side, terms)

    causal = False
    if len(masks) > 1:
        problems.append("more than one mask is applied to the scores; only one causal mask is")
    elif masks:
        try:
            causal = _check_causal(masks[0], x, values)
        except Skip as e:
            problems.append(str(e))
    m = Match(site, q, k, v, out, causal, terms, interior=interior)
    m.three_d = kind == "bmm" or _ev(q).dim() == 3
    if problems:
        raise Skip(problems[0])
    return m


def _check_causal(mask: tuple[str, Any, Any], scores: Any, values: _Values) -> bool:
    """True if the one mask on the scores is exactly causal; Skip (with the reason) if not."""
    how, mask_node, fill = mask
    if how == "add":
        unsupported = (
            "additive attn_mask is not supported: only causal masks are (use is_causal=True "
            "or a tril buffer with masked_fill); left to Inductor"
        )
    else:
        unsupported = (
            "the mask is not causal (only the lower-triangular causal mask is supported; "
            "padding/arbitrary masks are left to Inductor)"
        )
    if how != "add" and (not isinstance(fill, (int, float)) or fill > _NEAR_NEG_INF):
        raise Skip(
            f"masked value {fill!r} is not -inf (or finfo.min); only causal masks filled with "
            "-inf are supported"
        )
    if not isinstance(mask_node, fx.Node):
        raise Skip(unsupported)
    se = _ev(scores)
    if not _known_eq(se.shape[-2], se.shape[-1]):
        # A mask slice proven causal for one (Tq, Tk) may not be for another pair the same
        # graph sees later; SDPA's is_causal has no such problem.
        raise Skip(
            "a causal mask with query and key lengths that may differ is not supported "
            "(use F.scaled_dot_product_attention(is_causal=True))"
        )
    try:
        value = eval_mask(mask_node, values)
    except Skip as e:
        raise Skip(unsupported + f" ({e})" if how == "add" else str(e)) from e
    tq, tk = _hint(se.shape[-2]), _hint(se.shape[-1])
    keep = how in ("add", "where_keep")
    if how == "add" and not value.is_floating_point():
        raise Skip(unsupported)
    if not is_causal_mask(value, tq, tk, keep=keep):
        raise Skip(unsupported)
    return True


def match_sdpa(n: Any, values: _Values) -> Match:
    """F.scaled_dot_product_attention: accepted with is_causal/scale/enable_gqa, no mask/dropout."""
    q, k, v = (_arg(n, i, name) for i, name in enumerate(("query", "key", "value")))
    mask = _arg(n, 3, "attn_mask")
    dropout_p = _arg(n, 4, "dropout_p", 0.0)
    is_causal = _arg(n, 5, "is_causal", False)
    scale = _arg(n, 6, "scale")
    enable_gqa = _arg(n, 7, "enable_gqa", False)
    site = Site(kind="sdpa", location=location(n))
    if not isinstance(is_causal, bool):
        raise Skip("is_causal is not a Python constant")
    if not isinstance(enable_gqa, bool):
        raise Skip("enable_gqa is not a Python constant")
    if dropout_p != 0:
        raise Skip(
            f"dropout_p={dropout_p} (nonzero, or not a constant): flashgen kernels have no "
            "dropout; pass dropout_p=0 outside training (model.eval())"
        )
    if mask is not None:
        if is_causal or not isinstance(mask, fx.Node):
            raise Skip("attn_mask together with is_causal=True is not supported")
        tq, tk = _hint(_ev(q).shape[-2]), _hint(_ev(k).shape[-2])
        why = ""
        try:
            causal_mask = is_causal_mask(eval_mask(mask, values), tq, tk, keep=True)
        except Skip as e:
            causal_mask, why = False, f" ({e})"
        if not causal_mask:
            kind = "boolean" if _ev(mask).dtype == torch.bool else "additive"
            raise Skip(
                f"{kind} attn_mask is not supported: only a causal mask is (pass is_causal=True); "
                f"left to Inductor{why}"
            )
        is_causal = True
    terms: list[Any] = [None] if scale is None else [(scale, 1)]
    m = Match(site, q, k, v, n, is_causal, terms, interior=[n])
    m.three_d = _ev(q).dim() == 3
    if not enable_gqa and not _known_eq(_ev(q).shape[-3], _ev(k).shape[-3]):
        raise Skip("query and key head counts differ without enable_gqa=True")
    return m


# ----------------------------------------------------------------------------- MultiheadAttention


def match_mha(n: Any, values: _Values) -> Match:
    """`F.multi_head_attention_forward` (what nn.MultiheadAttention calls; Dynamo keeps it as one
    node): rebuilt as projections -> flashgen op -> output projection when no weights are
    returned, no padding mask, no bias_k/v or zero-attn, and any mask is causal."""
    import inspect

    try:
        a = inspect.signature(F.multi_head_attention_forward).bind(*n.args, **n.kwargs)
    except TypeError as e:
        raise Skip(f"unexpected multi_head_attention_forward call: {e}") from e
    a.apply_defaults()
    p = a.arguments
    if p["need_weights"] is not False:
        raise Skip(
            "nn.MultiheadAttention returns attention weights (need_weights=True, the default); "
            "call it with need_weights=False"
        )
    for name in ("key_padding_mask", "bias_k", "bias_v", "static_k", "static_v"):
        if p[name] is not None:
            raise Skip(f"nn.MultiheadAttention with {name} is not supported")
    if p["add_zero_attn"] is not False:
        raise Skip("nn.MultiheadAttention with add_zero_attn=True is not supported")
    if p["training"] is not False and p["dropout_p"] != 0:
        raise Skip(
            f"dropout p={p['dropout_p']} in training mode: flashgen kernels have no dropout; "
            "call model.eval() or set dropout=0"
        )
    if not isinstance(p["num_heads"], int) or not isinstance(p["is_causal"], bool):
        raise Skip("num_heads / is_causal are not Python constants")
    q, k, v = p["query"], p["key"], p["value"]
    causal = False
    if p["attn_mask"] is not None:
        mask = p["attn_mask"]
        tq, tk = _hint(_ev(q).shape[0]), _hint(_ev(k).shape[0])
        try:
            causal = isinstance(mask, fx.Node) and is_causal_mask(
                eval_mask(mask, values), tq, tk, keep=False
            )
        except Skip:
            causal = False
        if not causal or not _known_eq(_ev(q).shape[0], _ev(k).shape[0]):
            raise Skip(
                "nn.MultiheadAttention attn_mask is not supported: only a causal mask is "
                "(nn.Transformer.generate_square_subsequent_mask); left to Inductor"
            )
    elif p["is_causal"]:
        raise Skip("is_causal=True without attn_mask")
    users = list(n.users)
    if not all(u.op == "call_function" and u.target is operator.getitem for u in users):
        raise Skip("the (output, weights) result of nn.MultiheadAttention is used whole")
    outs = [u for u in users if u.args[1] == 0]
    if len(outs) != 1 or any(u.users for u in users if u.args[1] != 0):
        raise Skip("the attention weights of nn.MultiheadAttention are used")
    site = Site(kind="mha", location=location(n))
    m = Match(site, q, k, v, outs[0], causal, [None], interior=[n])
    m.mha = p
    return m


def _mha_projection(p: dict[str, Any], which: int) -> tuple[Any, Any]:
    """(weight, bias) source for projection `which` (0 q, 1 k, 2 v) as nodes or slices."""
    bias = p["in_proj_bias"]
    if p["use_separate_proj_weight"]:
        w = p[("q_proj_weight", "k_proj_weight", "v_proj_weight")[which]]
        return w, (None if bias is None else ("slice", bias, which))
    return ("slice", p["in_proj_weight"], which), (None if bias is None else ("slice", bias, which))


def check_mha(m: Match) -> None:
    """Kernel eligibility for a MultiheadAttention site, on the projected (fake) shapes."""
    p = m.mha
    assert p is not None
    q, k, v = (_ev(x) for x in (m.q, m.k, m.v))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
        raise Skip("only batched (3-D) nn.MultiheadAttention inputs are supported")
    wq = _ev(p["q_proj_weight"] if p["use_separate_proj_weight"] else p["in_proj_weight"])
    e = wq.shape[-1]
    heads = p["num_heads"]
    if not isinstance(e, int) or e % heads:
        raise Skip("embedding dim is not a static multiple of num_heads")
    if not (_known_eq(k.shape[-1], e) and _known_eq(v.shape[-1], e) and q.shape[-1] == e):
        raise Skip("kdim/vdim different from embed_dim are not supported")
    d = e // heads
    shaped = [t.unflatten(-1, (heads, d)).permute(1, 2, 0, 3).contiguous() for t in (q, k, v)]
    from .validate import check_inputs

    try:
        scale = check_inputs(*shaped, causal=m.causal, scale=None)
    except ValueError as err:
        raise Skip(f"the flashgen kernels do not take this site: {err}") from err
    m.scale = scale
    m.site.scale, m.site.causal = scale, m.causal
    shape = "x".join(str(x) for x in shaped[0].shape)
    m.site.shape = f"q[{shape}] {str(q.dtype).replace('torch.', '')}"


def rewrite_mha(gm: fx.GraphModule, m: Match, op: Any) -> None:
    """query/key/value [T, B, E] -> linear -> [B, H, T, D] -> op -> [T, B, E] -> out_proj."""
    p = m.mha
    assert p is not None
    g = gm.graph
    heads = p["num_heads"]
    e = _ev(p["q_proj_weight"] if p["use_separate_proj_weight"] else p["in_proj_weight"]).shape[-1]
    d = e // heads
    fm = _fake_mode(_ev(m.out))
    added: list[Any] = []

    def call(fn: Any, *args: Any) -> Any:
        node = g.call_function(fn, args) if callable(fn) else g.call_method(fn, args)
        added.append(node)
        return node

    def piece(src: Any, which: int) -> Any:
        if not (isinstance(src, tuple) and src and src[0] == "slice"):
            return src
        return call(operator.getitem, src[1], slice(which * e, (which + 1) * e))

    with g.inserting_before(m.out):
        heads_in = []
        for which, x in enumerate((m.q, m.k, m.v)):
            w, b = _mha_projection(p, which)
            y = call(F.linear, x, piece(w, which), piece(b, which))
            y = call("unflatten", y, -1, (heads, d))
            heads_in.append(call("contiguous", call("permute", y, 1, 2, 0, 3)))
        o = call(op, *heads_in, m.causal, m.scale)
        o = call("flatten", call("permute", o, 2, 0, 1, 3), -2)
        out = call(F.linear, o, p["out_proj_weight"], p["out_proj_bias"])
    _set_example_values(fm, added)
    stack = m.out.meta.get("stack_trace")
    for node in added:
        node.meta["stack_trace"] = stack
    m.out.replace_all_uses_with(out)
    _erase_dead(g, [m.out, *m.interior])


# ----------------------------------------------------------------------------- checks, rewrite


def check_match(m: Match) -> None:
    """Kernel eligibility on the example (fake) values; fills scale, shape and GQA group."""
    q, k, v, o = _ev(m.q), _ev(m.k), _ev(m.v), _ev(m.out)
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v, o)):
        raise Skip("an operand is not a tensor")
    if not (q.dim() == k.dim() == v.dim() == o.dim() and q.dim() in (3, 4)):
        raise Skip(f"q/k/v must all be 4-D [batch, heads, seq, dim] (or 3-D); got {q.dim()}-D q")
    dtypes = {q.dtype, k.dtype, v.dtype, o.dtype}
    if len(dtypes) != 1:
        names = "/".join(str(t.dtype).replace("torch.", "") for t in (q, k, v, o))
        raise Skip(f"q, k, v and the output must share one dtype; got {names}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise Skip(f"dtype {q.dtype} is not supported (float16, bfloat16, float32 are)")
    if len({q.device.type, k.device.type, v.device.type}) != 1:
        raise Skip("q, k, v are on different devices")
    d = q.shape[-1]
    if not (_known_eq(k.shape[-1], d) and _known_eq(v.shape[-1], d)):
        raise Skip("q, k and v must have the same head dim")
    if not _known_eq(k.shape[-2], v.shape[-2]):
        raise Skip("k and v have different sequence lengths")
    lead = q.dim() - 3
    for i in range(lead):
        if not (_known_eq(q.shape[i], k.shape[i]) and _known_eq(q.shape[i], v.shape[i])):
            raise Skip("q, k, v batch sizes differ (broadcast batch is not supported)")
    hk, hv = k.shape[-3], v.shape[-3]
    if not _known_eq(hk, hv):
        raise Skip("k and v have different head counts")
    if not (_known_eq(o.shape[-1], d) and _known_eq(o.shape[-2], q.shape[-2])):
        raise Skip("the output shape is not [..., seq_q, head_dim]")
    # GQA spelled as a copy of K/V: hand the kernel the un-repeated tensors instead.
    kb, nk = _repeat_base(m.k)
    vb, nv = _repeat_base(m.v)
    if nk == nv and nk > 1:
        m.k, m.v = kb, vb
        k, v = _ev(kb), _ev(vb)
    operands = [q, k, v]
    if m.three_d:
        operands = [t.unsqueeze(0) for t in operands]
    m.contiguous = [t.stride(-1) != 1 for t in operands]
    operands = [t.contiguous() if c else t for t, c in zip(operands, m.contiguous, strict=True)]
    group = max(_hint(operands[0].shape[1]) // max(_hint(operands[1].shape[1]), 1), 1)
    from .validate import check_inputs

    try:
        check_inputs(*operands, causal=m.causal, scale=None)
    except ValueError as e:
        raise Skip(f"the flashgen kernels do not take this site: {e}") from e
    # Decisions that add guards come last, once everything else passed.
    hd = int(d)
    syms = _head_dim_symbols(q, k)
    scale = 1.0
    for term in m.scale_terms:
        if term is None:
            scale *= 1.0 / math.sqrt(hd)
            continue
        c, power = term
        val = const_value(c, syms)
        if power < 0 and val == 0:
            raise Skip("scores are divided by zero")
        scale *= val if power > 0 else 1.0 / val
    if not m.scale_terms:
        scale = 1.0
    if not (scale > 0 and math.isfinite(scale)):
        raise Skip(f"scale {scale} is not a positive finite number")
    m.scale = scale
    m.site.scale = scale
    m.site.causal = m.causal
    m.site.gqa_group = group
    shape = "x".join(str(s) for s in q.shape)
    m.site.shape = f"q[{shape}] {str(q.dtype).replace('torch.', '')}"


def _fake_mode(example: Any) -> Any:
    return getattr(example, "fake_mode", None)


def rewrite(gm: fx.GraphModule, m: Match, op: Any) -> None:
    """Insert op(q, k, v, causal, scale) before m.out, reroute its users, drop dead interior."""
    g = gm.graph
    fm = _fake_mode(_ev(m.out))
    added: list[fx.Node] = []
    with g.inserting_before(m.out):
        args = [m.q, m.k, m.v]
        if m.three_d:
            args = [g.call_method("unsqueeze", (a, 0)) for a in args]
            added += args
        for i, needs in enumerate(m.contiguous):
            if needs:
                args[i] = g.call_method("contiguous", (args[i],))
                added.append(args[i])
        new = g.call_function(op, (*args, m.causal, m.scale))
        result = g.call_method("squeeze", (new, 0)) if m.three_d else new
    _set_example_values(fm, [*added, new, result])
    new.meta["stack_trace"] = m.out.meta.get("stack_trace")
    dead = [*m.interior, m.out]
    m.out.replace_all_uses_with(result)
    _erase_dead(g, dead)


def _set_example_values(fm: Any, nodes: list[Any]) -> None:
    """Recompute meta['example_value'] on the new nodes: Inductor's pre-grad passes read it."""
    if fm is None:
        return
    with fm:
        for n in nodes:
            args = fx.map_arg(n.args, lambda a: a.meta["example_value"])
            if n.op == "call_method":
                n.meta["example_value"] = getattr(args[0], n.target)(*args[1:])
            else:
                n.meta["example_value"] = n.target(*args)


def _erase_dead(g: fx.Graph, start: list[fx.Node]) -> None:
    """Erase start nodes and then their inputs that lost all users, if side-effect free."""
    work = list(start)
    erased: set[fx.Node] = set()
    while work:
        n = work.pop()
        if n in erased or n.users or n.op in ("placeholder", "output", "get_attr"):
            continue
        if n.op == "call_method" and str(n.target).endswith("_") and n not in start:
            continue
        if n.op == "call_function" and n.is_impure() and n not in start:
            continue
        if n.op == "call_module":
            continue
        inputs = n.all_input_nodes
        g.erase_node(n)
        erased.add(n)
        work.extend(inputs)


def attention_pass(
    gm: fx.GraphModule,
    example_inputs: list[Any],
    op: Any = None,
    *,
    rewrite_graph: bool = True,
    graph_index: int = 0,
) -> list[Site]:
    """Find every attention site; replace the eligible ones with `op` (None: report only)."""
    values = _Values(gm, example_inputs)
    sites: list[Site] = []
    matches: list[Match] = []
    for n in list(gm.graph.nodes):
        kind = (
            "sdpa"
            if _is_fn(n, _SDPA)
            else "mha"
            if _is_fn(n, {F.multi_head_attention_forward})
            else "softmax"
            if _is_softmax(n)
            else None
        )
        if kind is None:
            continue
        try:
            if kind == "sdpa":
                m = match_sdpa(n, values)
            elif kind == "mha":
                m = match_mha(n, values)
            else:
                if not _softmax_dim_ok(n):
                    continue
                got = match_softmax(n, values)
                if got is None:
                    continue
                m = got
            if m.mha is not None:
                check_mha(m)
            else:
                check_match(m)
        except Skip as e:
            site = Site(kind=_kind_of(n, kind), location=location(n), reason=str(e))
            site.graph = graph_index
            sites.append(site)
            counters[f"{site.kind}.found"] += 1
            counters[f"{site.kind}.skipped"] += 1
            continue
        m.site.graph = graph_index
        sites.append(m.site)
        matches.append(m)
        counters[f"{m.site.kind}.found"] += 1
    for m in matches:
        if not rewrite_graph:
            m.site.replaced = True  # report-only (explain): "would be replaced"
        elif op is None:
            m.site.reason = "the flashgen::attention op is not available (flashgen.ops)"
            counters[f"{m.site.kind}.skipped"] += 1
        else:
            (rewrite_mha if m.mha is not None else rewrite)(gm, m, op)
            m.site.replaced = True
            counters[f"{m.site.kind}.replaced"] += 1
    if rewrite_graph and matches and op is not None:
        gm.graph.lint()
        gm.recompile()
    return sites


def _kind_of(n: Any, kind: str) -> str:
    """Best-effort product kind for a skipped softmax site (for the report only)."""
    if kind in ("sdpa", "mha"):
        return kind
    x = n.args[0] if n.args else None
    for _ in range(8):
        if not isinstance(x, fx.Node):
            break
        prod = split_scores_product(x)
        if prod is not None:
            return prod[0]
        ins = [a for a in x.all_input_nodes if _is_tensor_node(a)]
        x = ins[0] if ins else None
    return "matmul"
