"""Shared pieces of the attention matcher: the site/match records, FX node helpers, constant
scales, the two products of attention, GQA repeats, and small graph-editing helpers."""

from __future__ import annotations

import collections
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from ...core.spec import DTYPES

counters: collections.Counter[str] = collections.Counter()


def replaced_total() -> int:
    """How many attention sites the pass has replaced so far in this process, every kind
    (`counters`' "<kind>.replaced" entries): what scripts and examples compare before and
    after compiling a model."""
    return sum(n for key, n in counters.items() if key.endswith(".replaced"))


def kept_total() -> int:
    """How many replaceable attention sites the pass has left to PyTorch on purpose so far in
    this process (`choice.keep_reason`: PyTorch's own call is as fast or faster there), every
    kind: beside `replaced_total`, a compiled model whose sites were all kept ran what it
    should."""
    return sum(n for key, n in counters.items() if key.endswith(".kept"))


SUPPORTED_DTYPES = tuple(getattr(torch, name) for name in DTYPES)  # what the kernels take

SDPA_FNS = {torch._C._nn.scaled_dot_product_attention, F.scaled_dot_product_attention}
SOFTMAX_FNS = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.special.softmax}
_MATMUL_FNS = {torch.matmul, operator.matmul, torch.bmm, torch.Tensor.matmul, torch.Tensor.bmm}
_EINSUM_FNS = {torch.einsum, torch.functional.einsum}
MUL_FNS = {operator.mul, torch.mul, torch.Tensor.mul, operator.imul}
DIV_FNS = {operator.truediv, torch.div, torch.true_divide, torch.Tensor.div, operator.itruediv}
SUB_FNS = {operator.sub, torch.sub, torch.Tensor.sub}
ADD_FNS = {operator.add, torch.add, torch.Tensor.add, operator.iadd} | SUB_FNS
MASKED_FILL_FNS = {torch.masked_fill, torch.Tensor.masked_fill}
DROPOUT_FNS = {F.dropout, torch.dropout, torch.nn.functional.dropout}
TANH_FNS = {torch.tanh, torch.Tensor.tanh, F.tanh}
CAST_METHODS = {"float", "to", "type", "type_as", "half", "bfloat16", "double"}
_METADATA_METHODS = {"size", "dim", "numel", "stride", "get_device"}
_METADATA_ATTRS = {"shape", "dtype", "device", "ndim", "is_cuda"}
NEAR_NEG_INF = -65504.0  # finfo(float16).min: any fill value at or below it acts as -inf
# meta key of a node whose reads do not count while the pass runs: the old chain a fold
# replaced (`window_views`), kept only to be restored if its site is not replaced
FOLDED_AWAY = "flashgen_folded_away"


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
    # a causal sliding window of this many keys, or a two-sided band (left, right) without
    # causal (None: no window)
    window: int | tuple[int, int] | None = None
    align: str = "top_left"  # where the causal diagonal lies when Sq != Sk ("bottom_right")
    mask: str = ""  # an attention-mask tensor the kernel reads: "bool" or "add" ("": none)
    # that tensor has one entry per key, the same for every query row (a key-padding mask: the
    # kernels read one vector of it a tile, not an N x N tile)
    key_mask: bool = False
    alibi: bool = False  # an additive bias proven ALiBi: the kernels compute it from slopes
    sinks: bool = False  # attention sinks: a per-head logit beside each row's scores (GPT-OSS)
    dropout: float = 0.0  # attention dropout probability in training mode (0: none)
    softcap: float | None = None  # logit softcapping cap * tanh(s / cap) (Gemma-2's), if proven
    scale: float | None = None
    head_scale: bool = False  # the scores times a tensor of one value per head too (q's)
    gqa_group: int = 1
    shape: str = ""
    graph: int = 0
    # What the run-time choice needs (filled for replaceable sites): dtype name, head dim,
    # example sequence lengths, device type; `impl` is filled by `flashgen.explain`.
    dtype: str = ""
    head_dim: int = 0
    seq_q: int = 0
    seq_k: int = 0
    rows: int = 0  # batch x query heads (the dims before the last two of q)
    device: str = ""
    impl: str = ""


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
    # causal sliding window (w keys ending at the query), or a two-sided band (left, right)
    window: int | tuple[int, int] | None = None
    align: str = "top_left"  # proven causal alignment (`flashgen.ops.attention`'s causal_align)
    attn_mask: fx.Node | None = None  # a mask tensor handed to the kernel as it is (attn_mask)
    mask_negated: bool = False  # attn_mask was subtracted from the scores: the kernel gets -mask
    # every query row of the additive attn_mask holds the same values (`mask_reading.key_row`):
    # the kernel gets its first row, a per-key mask
    mask_row: bool = False
    # a boolean attn_mask that marks hidden keys (masked_fill's): the kernel gets ~mask
    mask_hides: bool = False
    # (fill, whether True hides a key): the kernels get the boolean attn_mask as the additive
    # `where(hidden, fill, 0)` (`mask_reading._dropout_fill`)
    mask_fill: tuple[float, bool] | None = None
    # v of a site whose boolean mask (with a finite fill) may hide whole rows: eager gives them
    # a uniform softmax, the mean of v over the keys, which the rewrite puts on those rows
    empty_rows: fx.Node | None = None
    # the whole boolean mask those rows are read from, and whether True hides a key, where the
    # kernels get less of it (a `causal & keep` split: the causal flag and `keep` alone); None:
    # attn_mask itself, polarity mask_hides
    rows_from: tuple[fx.Node, bool] | None = None
    # a bias proven ALiBi (`alibi.prove_alibi`): the slopes node and its factor c (the kernels
    # get c * slopes as alibi_slopes)
    alibi: tuple[fx.Node, float] | None = None
    # a floating bias beside the boolean attn_mask (or alone, beside a proven causal mask), with
    # the head count H to unflatten it by from BLOOM's [B * H, ...] (None: already 4-D): the
    # rewrite hands the op `where(attn_mask, bias, -inf)` (`mask_reading._bias_beside_mask`); beside
    # a floating attn_mask, `attn_mask + bias` (`mask_reading._two_biases`)
    key_bias: tuple[fx.Node, int | None] | None = None
    dropout_p: float = 0.0  # attention dropout in training mode (the op's dropout_p)
    softcap: float | None = None  # cap of `cap * tanh(scores / cap)` (the op's softcap)
    # attention sinks: the tensor of one logit per query head (`sinks.sink_concat`; the op's
    # sinks, flattened to [Hq])
    sinks: fx.Node | None = None
    # HF BLOOM's layout: q/k/v are [B, H, T, D] tensors the graph flattened to [B * H, T, D]
    # for bmm/baddbmm (the match holds the 4-D ones); the op's output is flattened back
    flat_out: bool = False
    # the dtype autocast runs this attention's products in (float16 or bfloat16) where q, k and
    # v are not all of it (`matchers.autocast_dtype`): the rewrite casts them to it, as
    # autocast does before each product
    autocast: torch.dtype | None = None
    # factors of one value per query head the scores are multiplied (+1) or divided (-1) by
    # before any mask (`head_factor`: Swin v2's learned logit scale): the rewrite hands the op
    # q times (or over) each, which scales every score of a head alike
    head_scales: list[tuple[fx.Node, int]] = field(default_factory=list)


# ----------------------------------------------------------------------------- node helpers


def is_fn(n: Any, fns: set, methods: tuple[str, ...] = ()) -> bool:
    if not isinstance(n, fx.Node):
        return False
    if n.op == "call_function":
        return n.target in fns
    return n.op == "call_method" and n.target in methods


def dropout_prob(p: Any, training: Any, where: str) -> float:
    """The dropout probability a site applies: 0.0 outside training, else `p`, which must be
    a Python constant in [0, 1) (a traced graph fixes module.training and p; Skip otherwise)."""
    if isinstance(p, fx.Node) and (number := guarded_number(p)) is not None:
        p = number  # (a float attribute under dynamic=True: guarded to its value)
    if training is False or (isinstance(p, (int, float)) and p == 0):
        return 0.0
    if training is not True:
        raise Skip(f"{where}: the training flag is not a Python constant")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
        shown = "a run-time value" if isinstance(p, fx.Node) else repr(p)
        raise Skip(f"{where}: dropout p={shown} (a constant in [0, 1) is supported)")
    return float(p)


def node_arg(n: Any, i: int, name: str, default: Any = None) -> Any:
    """Argument `name` (positional index i, counting the tensor self for methods)."""
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def example_value(n: Any) -> Any:
    return n.meta.get("example_value") if isinstance(n, fx.Node) else n


def is_tensor_node(n: Any) -> bool:
    return isinstance(example_value(n), torch.Tensor)


def size_hint(x: Any) -> int:
    if isinstance(x, torch.SymInt):
        hint = x.node.hint
        if hint is None:
            raise Skip("a size is data-dependent (unbacked); flashgen needs a known shape")
        return int(hint)
    return int(x)


def known_eq(a: Any, b: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return bool(statically_known_true(a == b))


def equal_heads(a: Any, b: Any) -> bool:
    """Whether head counts a and b are equal: proven (`known_eq`), or equal at this trace with
    one of them symbolic (`dynamic=True` makes q's head count a symbol beside a buffer's
    constant), then guarded, `a == b` evaluated into the graph's guards as the head dim's is
    (`const_value`): a head count is fixed in a model, so the guard costs no recompile per
    length. Call it only once nothing else can refuse the site."""
    if known_eq(a, b):
        return True
    try:
        return size_hint(a) == size_hint(b) and bool(a == b)
    except Skip:
        return False


def same_length(a: Any, b: Any) -> bool:
    """Whether sequence lengths a and b are equal at every size the graph accepts: proven
    (`known_eq`), or equal at this trace's sizes and with every size symbol one above and one
    below its value (so not one length's coincidence, which a guard would pin), then guarded,
    `a == b` evaluated into the graph's guards. HF MPT's ALiBi, built for max_seq_len and
    sliced to the last keys, is 64 - Max(0, 63 - s) long beside the keys' s + 1 in a dynamic
    decoding step: equal at every length the model takes (its own add of the two guards as
    much) but not provable from the sizes' ranges alone."""
    if known_eq(a, b):
        return True
    if not (isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt)):
        return False  # two ints that differ
    try:
        if size_hint(a) != size_hint(b):
            return False
    except Skip:
        return False
    import sympy

    sym = a if isinstance(a, torch.SymInt) else b
    env = sym.node.shape_env
    ea, eb = (x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(x) for x in (a, b))
    free = ea.free_symbols | eb.free_symbols
    if not free or any(s not in env.var_to_val for s in free):
        return False
    for delta in (1, -1):
        at = {s: sympy.Integer(int(env.var_to_val[s]) + delta) for s in free}
        if sympy.simplify(ea.subs(at) - eb.subs(at)) != 0:
            return False
    return bool(a == b)


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


# ----------------------------------------------------------------------------- constants


def head_dim_symbols(*tensors: torch.Tensor) -> set:
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
    length still reuses the graph; a float attribute left symbolic (`_float_symbols`) is guarded
    the same way, and so is one that `dynamic=True` turned into a 0-d tensor input read with
    `.item()` (`attribute_number`). Other values read from tensors are refused.
    """
    if isinstance(x, bool):
        raise Skip("scale is a bool")
    if isinstance(x, (int, float)):
        return float(x)
    val = example_value(x)
    if isinstance(val, (torch.SymInt, torch.SymFloat)):
        if (number := attribute_number(x)) is not None:
            return number
        free = val.node.expr.free_symbols
        if not free - _float_symbols(free) <= allowed_symbols:
            raise Skip(
                "scale depends on a dynamic size other than the head dim; use a constant scale"
            )
        return float(val)  # (guards the head dim and the float attributes it reads)
    if isinstance(val, (int, float)) and not isinstance(val, bool):
        return float(val)
    raise Skip(
        "scale is not a compile-time constant (it is computed from a tensor at run time: use a "
        "literal, a module's float attribute or math.sqrt of the head dim)"
    )


def guarded_number(x: Any) -> int | float | None:
    """`x` (a Python number, or a node or SymFloat standing for one) as a Python number: a
    float attribute that `dynamic=True` left symbolic (HF's `self.beta`, Gemma-2's softcap) is
    guarded to its value (`_float_symbols`: no recompile per length); None for anything else
    (a tensor, a size, a value computed from one)."""
    v = example_value(x) if isinstance(x, fx.Node) else x
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, torch.SymFloat):
        free = v.node.expr.free_symbols
        if free and free == _float_symbols(free):
            return float(v)
        return attribute_number(x)
    return None


def scalar_number(n: Any) -> Any:
    """The number a node holds where it is `torch.tensor(x)` or `torch.scalar_tensor(x)` of a
    Python number x (HF GPT-Neo's fill: `torch.where(causal, scores, torch.tensor(finfo.min,
    dtype=scores.dtype))`; transformers 5.17's zero, `torch.tensor(0.0)`), as its dtype holds it
    (a 0-d tensor beside the scores leaves the result's dtype to them, as a Python number
    does); `n` itself otherwise (a Python number comes back as it is)."""
    if not (isinstance(n, fx.Node) and is_fn(n, {torch.tensor, torch.scalar_tensor})):
        return n
    if len(n.args) != 1 or set(n.kwargs) - {"dtype", "device"}:
        return n
    x, val = n.args[0], example_value(n)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return n
    if not (isinstance(val, torch.Tensor) and val.dim() == 0 and val.dtype != torch.bool):
        return n
    return float(torch.tensor(x, dtype=val.dtype))


# ops a 0-d tensor of numbers may pass through and still be a number known when compiling
_FOLD_FNS = {
    torch.sqrt, torch.rsqrt, torch.Tensor.sqrt, torch.Tensor.rsqrt, torch.Tensor.float,
    torch.Tensor.to, operator.neg, torch.neg, operator.pow, torch.pow,
} | MUL_FNS | DIV_FNS | {operator.add, operator.sub, torch.add, torch.sub}  # fmt: skip
_FOLD_METHODS = ("sqrt", "rsqrt", "float", "to", "mul", "div", "add", "sub", "neg", "pow")


def folded_number(n: Any, depth: int = 8) -> float | None:
    """The value of a 0-d floating tensor computed from Python numbers alone, as its dtype
    holds it (HF DeBERTa's scale, `torch.sqrt(torch.tensor(head_dim, dtype=float) * 3)`, its
    `.to(dtype)` taken as the scores divide by it): evaluated here with the graph's own ops on
    those numbers, so the kernel's scale is the value eager divides by. None for anything that
    reads a tensor input, a size that is not fixed, or another op."""
    val = example_value(n) if isinstance(n, fx.Node) else None
    if not (isinstance(val, torch.Tensor) and val.dim() == 0 and val.is_floating_point()):
        return None
    real = _fold(n, depth)
    return None if real is None else float(real)


def _fold(n: Any, depth: int) -> Any:
    """`folded_number`'s walk: a real 0-d tensor (or Python number) equal to n's value, or
    None."""
    if isinstance(n, bool):
        return None
    if isinstance(n, (int, float)):
        return n
    if isinstance(n, torch.dtype):
        return n
    if not isinstance(n, fx.Node) or depth == 0 or n.op not in ("call_function", "call_method"):
        return None
    val = example_value(n)
    if not (isinstance(val, torch.Tensor) and val.dim() == 0):
        return None
    if is_fn(n, {torch.tensor, torch.scalar_tensor}):
        number = scalar_number(n)
        return None if number is n else torch.tensor(number, dtype=val.dtype)
    if not is_fn(n, _FOLD_FNS, _FOLD_METHODS):
        return None
    if set(n.kwargs) - {"dtype"}:
        return None
    args = [_fold(a, depth - 1) for a in n.args]
    if any(a is None for a in args):
        return None
    kwargs = dict(n.kwargs)
    if n.op == "call_method":
        real = getattr(args[0], n.target)(*args[1:], **kwargs)
    else:
        real = n.target(*args, **kwargs)
    ok = isinstance(real, torch.Tensor) and real.dim() == 0 and real.dtype == val.dtype
    return real if ok else None


def attribute_number(x: Any) -> float | None:
    """The value of a module's float attribute that `dynamic=True` turned into a tensor input
    read with `.item()` (HF's `self.attention_dropout` in training mode, Gemma-2's softcap), with
    a guard that it stays so: Dynamo then recompiles the frame when the attribute changes
    instead of handing the graph a new value (the kernels take these numbers when compiled).
    None for anything else: not `item()` of an input, a forward() argument rather than module
    state, no record of its source, or no Dynamo compile running (nothing to guard)."""
    if not (isinstance(x, fx.Node) and x.op == "call_method" and x.target == "item"):
        return None
    ph = x.args[0] if len(x.args) == 1 else None
    if not (isinstance(ph, fx.Node) and ph.op == "placeholder"):
        return None
    from .mask_values import is_buffer_placeholder

    arg = ph.meta.get("grapharg")
    source = getattr(arg, "source", None)
    context = torch._guards.TracingContext.try_get()
    if source is None or context is None or not is_buffer_placeholder(ph):
        return None
    try:
        real = arg.example
    except (AttributeError, AssertionError):  # the tensor is gone
        return None
    if not isinstance(real, torch.Tensor) or real.numel() != 1 or not real.is_floating_point():
        return None
    from torch._dynamo.guards import GuardBuilder

    context.guards_context.dynamo_guards.add(source.make_guard(GuardBuilder.EQUALS_MATCH))
    return float(real.item())


def _float_symbols(free: set) -> set:
    """The symbols among `free` that stand for Python floats Dynamo left unspecialised (under
    `dynamic=True` a float module attribute, HF's `self.scaling`, becomes a backed SymFloat):
    guarding one costs a recompile only if the attribute changes, never one per length. Empty
    where this torch lacks the symbol kinds."""
    try:
        from torch.utils._sympy.symbol import SymT, symbol_is_type
    except ImportError:  # pragma: no cover - older torch: such floats were tensors
        return set()
    return {s for s in free if symbol_is_type(s, SymT.FLOAT)}


def _scalar_operand(n: Any, chain: Any) -> Any | None:
    """For mul/div nodes: the operand that is not `chain`, if it is not a tensor."""
    others = [a for a in n.args[:2] if a is not chain]
    if len(others) != 1 or (len(n.args) > 2 or n.kwargs):
        return None
    other = others[0]
    if isinstance(other, fx.Node) and is_tensor_node(other):
        if (number := folded_number(other)) is not None:
            return number
        if example_value(other).dim() == 0:
            raise Skip(
                "scale is a 0-d tensor, not a compile-time constant (with dynamic=True a float "
                "module attribute becomes a tensor input: use a literal or math.sqrt of the head dim)"
            )
        return None
    return other


def peel_one_scale(n: Any, terms: list[Any]) -> Any:
    """x if n is `x * c`, `c * x` or `x / c` (appending (c, +-1) to terms), else None."""
    if is_fn(n, MUL_FNS, ("mul", "mul_")):
        for x in n.args[:2]:
            if isinstance(x, fx.Node) and is_tensor_node(x):
                c = _scalar_operand(n, x)
                if c is not None:
                    terms.append((c, 1))
                    return x
        return None
    if is_fn(n, DIV_FNS, ("div", "div_", "true_divide")) and isinstance(n.args[0], fx.Node):
        if "rounding_mode" in n.kwargs:
            return None
        c = _scalar_operand(n, n.args[0])
        if c is None:
            return None
        terms.append((c, -1))
        return n.args[0]
    return None


def head_factor(n: Any, x: Any) -> tuple[fx.Node, int] | None:
    """(t, +1) if n is `x * t` or `t * x`, (t, -1) if `x / t`, where x is 4-D scores and t a
    tensor of one value per head: every dim of size 1 but the third from the end, which is 1
    or the scores' head count (Swin v2's learned `logit_scale` of shape [H, 1, 1]). The
    kernels take one scale for every head, but such a factor multiplies each row of Q K^T of
    a head alike, so q times t gives the same scores (its gradient flows through that
    product). None otherwise (0-d tensors and numbers are `peel_one_scale`'s)."""
    if not (isinstance(x, fx.Node) and is_tensor_node(x) and x in n.args[:2]):
        return None
    if len(n.args) != 2 or n.kwargs:
        return None
    if is_fn(n, MUL_FNS, ("mul", "mul_")):
        t, power = n.args[1] if n.args[0] is x else n.args[0], 1
    elif is_fn(n, DIV_FNS, ("div", "div_", "true_divide")) and n.args[0] is x:
        t, power = n.args[1], -1
    else:
        return None
    if not (isinstance(t, fx.Node) and is_tensor_node(t)) or t is x:
        return None
    tv, sv = example_value(t), example_value(x)
    if sv.dim() != 4 or not 1 <= tv.dim() <= 4:
        return None
    dims = list(tv.shape)
    head = dims.pop(-3) if tv.dim() >= 3 else 1
    if not all(known_eq(d, 1) for d in dims):
        return None
    # (a head count left symbolic beside the factor's constant is guarded equal when the site
    # is rewritten: `passes.check_match`)
    if known_eq(head, 1):
        return t, power
    try:
        return (t, power) if size_hint(head) == size_hint(sv.shape[1]) else None
    except Skip:  # (an unbacked size)
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


_ATEN_MT = getattr(torch.ops.aten, "mT", None)  # torch >= 2.14 records `k.mT` as this op
_MT_OPS = () if _ATEN_MT is None else (_ATEN_MT, _ATEN_MT.default)


def _transpose_base(b: Any) -> Any:
    """x if b is x with its last two dims swapped (transpose/mT/permute), else None."""
    if not isinstance(b, fx.Node):
        return None
    nd = example_value(b).dim() if is_tensor_node(b) else None
    if nd is None:
        return None
    if is_fn(b, {torch.transpose, torch.Tensor.transpose}, ("transpose", "swapaxes")):
        dims = {node_arg(b, 1, "dim0") % nd, node_arg(b, 2, "dim1") % nd}
        return b.args[0] if dims == {nd - 2, nd - 1} else None
    if b.op == "call_function" and b.target is getattr and b.args[1] == "mT":
        return b.args[0]
    if b.op == "call_function" and b.target in _MT_OPS:
        return b.args[0]
    if is_fn(b, {torch.permute}, ("permute",)):
        perm = b.args[1] if isinstance(b.args[1], (tuple, list)) else b.args[1:]
        want = list(range(nd - 2)) + [nd - 1, nd - 2]
        return b.args[0] if [p % nd for p in perm] == want else None
    if is_fn(b, set(), ("t",)) and nd == 2:
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
    if is_fn(s, _MATMUL_FNS, ("matmul", "bmm")):
        kind = "bmm" if s.target in (torch.bmm, torch.Tensor.bmm, "bmm") else "matmul"
        return kind, s.args[0], s.args[1], True
    if is_fn(s, _EINSUM_FNS):
        parts = _einsum_parts(s)
        if parts is None:
            return None
        a, b, o, x, y = parts
        if len(a) < 2 or len(a) != len(b) or len(o) != len(a) or not a[:-2] == b[:-2] == o[:-2]:
            return None
        i, c = a[-2], a[-1]
        if b[-1] == c and o[-2:] == [i, b[-2]] and len({i, c, b[-2]}) == 3:
            return "einsum", x, y, False
        if b[-2] == c and o[-2:] == [i, b[-1]] and len({i, c, b[-1]}) == 3:
            return "einsum", x, y, True
    return None


_BADDBMM_FNS = {torch.baddbmm, torch.Tensor.baddbmm}


def split_baddbmm(s: Any) -> tuple[Any, Any, Any, Any, Any] | None:
    """(bias, batch1, batch2, beta, alpha) for `bias.baddbmm(batch1, batch2, beta=, alpha=)`
    (beta * bias + alpha * batch1 @ batch2: HF BLOOM's scores with their ALiBi), else None."""
    if not is_fn(s, _BADDBMM_FNS, ("baddbmm",)):
        return None
    bias, b1, b2 = (node_arg(s, i, name) for i, name in enumerate(("input", "batch1", "batch2")))
    known = {"input", "batch1", "batch2", "beta", "alpha"}
    if any(x is None for x in (bias, b1, b2)) or set(s.kwargs) - known:
        return None
    return bias, b1, b2, s.kwargs.get("beta", 1), s.kwargs.get("alpha", 1)


def _is_view(n: Any) -> bool:
    return is_fn(n, {torch.reshape}, ("view", "reshape"))


def unflatten_src(n: Any) -> Any:
    """x if node n views 3-D x [B * H, S, T] as 4-D [B, H, S, T] (HF BLOOM's scores), else
    None."""
    if not _is_view(n) or not is_tensor_node(n.args[0]):
        return None
    src, out = example_value(n.args[0]), example_value(n)
    if src.dim() != 3 or out.dim() != 4:
        return None
    same = known_eq(out.shape[2], src.shape[1]) and known_eq(out.shape[3], src.shape[2])
    return n.args[0] if same and known_eq(out.shape[0] * out.shape[1], src.shape[0]) else None


def flattens(n: Any, b: Any, h: Any) -> Any:
    """x if node n views (or reshapes) 4-D x [b, h, S, T] as 3-D [b * h, S, T], else None."""
    if not _is_view(n) or not is_tensor_node(n.args[0]):
        return None
    src, out = example_value(n.args[0]), example_value(n)
    if src.dim() != 4 or out.dim() != 3:
        return None
    ok = known_eq(src.shape[0], b) and known_eq(src.shape[1], h)
    ok = ok and known_eq(out.shape[0], b * h)
    ok = ok and known_eq(out.shape[1], src.shape[2]) and known_eq(out.shape[2], src.shape[3])
    return n.args[0] if ok else None


def split_value_product(o: Any, p: Any) -> Any:
    """V if node o computes P @ V with P = p, else None."""
    if is_fn(o, _MATMUL_FNS, ("matmul", "bmm")):
        return o.args[1] if o.args[0] is p else None
    if is_fn(o, _EINSUM_FNS):
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


def repeat_base(x: Any) -> tuple[Any, int]:
    """(kv, n) if x is kv with each head repeated n times consecutively (dim 1), else (x, 1)."""
    if is_fn(x, {torch.repeat_interleave, torch.Tensor.repeat_interleave}, ("repeat_interleave",)):
        reps, dim = node_arg(x, 1, "repeats"), node_arg(x, 2, "dim")
        if (
            isinstance(reps, int)
            and not isinstance(reps, bool)
            and dim in (1, -3)
            and example_value(x.args[0]).dim() == 4
            and "output_size" not in x.kwargs
        ):
            return x.args[0], reps
    if is_fn(x, {torch.reshape}, ("reshape", "view")):
        e = x.args[0]
        if is_fn(e, set(), ("expand",)):
            u = e.args[0]
            ue = example_value(u)
            if ue is not None and ue.dim() == 5:
                base = None
                if is_fn(u, {torch.unsqueeze}, ("unsqueeze",)) and node_arg(u, 1, "dim") in (2, -3):
                    base = u.args[0]
                elif u.op == "call_function" and u.target is operator.getitem:
                    idx = u.args[1]
                    if isinstance(idx, tuple) and len(idx) >= 3 and idx[2] is None:
                        full = slice(None, None, None)
                        if all(s == full for s in idx[:2]) and all(s == full for s in idx[3:]):
                            base = u.args[0]
                ee, xe = example_value(e), example_value(x)
                if base is not None and xe is not None and xe.dim() == 4:
                    n = ee.shape[2]
                    if isinstance(n, int) and known_eq(xe.shape[1], ee.shape[1] * n):
                        return base, n
    return x, 1


def fake_mode(example: Any) -> Any:
    return getattr(example, "fake_mode", None)


def set_example_values(fm: Any, nodes: list[Any]) -> None:
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


def erase_dead(g: fx.Graph, start: list[fx.Node]) -> None:
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
