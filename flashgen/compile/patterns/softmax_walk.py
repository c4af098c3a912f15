"""The walk from a hand-written softmax to the attention around it, for `matchers.match_softmax`:
up to the scores product Q K^T through what model code applies to the scores (casts, scale
factors, a softcap's tanh, masks and added biases, in any order), down to the value product P V
through a cast back and dropout, then to the q, k and v operands under their scales, transposes
and [batch x heads] views. It records what it meets (`SoftmaxWalk`'s fields) and proves
nothing about the masks: `matchers` reads them.

Why a walk rather than a fixed pattern: model code writes each of these steps in several
spellings and orders (a bias added before or after the scale, a mask before or after the
upcast, BLOOM's baddbmm over [batch x heads]-flattened scores), and each step is recognised
wherever it stands. A step that does not belong to attention ends the walk with no match; a
step that does but that the kernels cannot compute is a problem (`problems`), whose first one
the matcher raises as the site's reason to stay as written.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx

from .core import (
    ADD_FNS,
    CAST_METHODS,
    DIV_FNS,
    DROPOUT_FNS,
    FOLDED_AWAY,
    MASKED_FILL_FNS,
    MUL_FNS,
    SUB_FNS,
    TANH_FNS,
    Skip,
    _transpose_base,
    dropout_prob,
    example_value,
    flattens,
    guarded_number,
    head_factor,
    is_fn,
    is_tensor_node,
    node_arg,
    peel_one_scale,
    peel_scale,
    scalar_number,
    split_baddbmm,
    split_scores_product,
    split_value_product,
    unflatten_src,
)
from .sinks import drops_sink_column, row_max_shift, sink_concat


class SoftmaxWalk:
    """What the walk from softmax `sm` met. Each stage returns False where the nodes are not
    attention (the matcher then returns None) and appends to `problems` what the kernels
    cannot compute.

    masks: (how, node, value) in the order met walking up: how is "masked_fill" (node the
    mask, value the fill), "where_keep" / "where_mask" (`where(cond, scores, value)` /
    `where(cond, value, scores)`), "add" / "sub" (node the bias). add_terms: for each additive
    mask by its index in `masks`, how many scale factors were met before it walking up (0: it
    is added after every one). terms: the scale factors as `peel_one_scale` records them.
    unflat: (B, H) where 3-D scores [B * H, Sq, Sk] are viewed as [B, H, Sq, Sk] on the way to
    the softmax (HF BLOOM); masks_4d: how many masks the walk met before that view (those
    applied to the 4-D scores). softcap: the cap of cap * tanh(scores / cap) (Gemma-2);
    masks_at_cap: how many masks the walk met before the tanh (applied after the softcap, as
    the kernels apply them). fills: in-place
    masked_fill_ calls taken as masks. scores: the Q K^T node; baddbmm its split where it is
    `bias.baddbmm(q, k^T)`. probs: the last node before the value product, out that product,
    drop_p the dropout met between.
    """

    def __init__(self, sm: fx.Node) -> None:
        self.sm = sm
        self.problems: list[str] = []
        self.interior: list[fx.Node] = [sm]
        self.terms: list[Any] = []
        self.masks: list[tuple[str, Any, Any]] = []
        self.add_terms: dict[int, int] = {}
        self.unflat: tuple[Any, Any] | None = None
        self.masks_4d = 0
        self.softcap: float | None = None
        self.masks_at_cap = 0
        self.fills: set[fx.Node] = set()  # (and a row-max shift's unread indices)
        self.scores: Any = sm.args[0] if sm.args else sm.kwargs.get("input")
        self.baddbmm: Any = None
        self.kind = ""
        self.q_side: Any = None
        self.k_side: Any = None
        self.transposed = False
        self.probs: fx.Node = sm
        self.out: Any = None
        self.v: Any = None
        self.drop_p = 0.0
        self.merged = False  # BLOOM: the probabilities viewed back as [B * H, Sq, Sk] for bmm
        # attention sinks (`sinks.sink_concat`): the per-head logits' tensor, whether their
        # column comes after the keys', whether the walk down met that column's drop
        self.sinks: Any = None
        self.sink_last = True
        self.sink_dropped = False
        self.row_max_src: Any = None  # the node a row-max shift under the softmax reads twice
        # per-head factors (`core.head_factor`) and how many masks the walk had met at each
        self.head_scales: list[tuple[fx.Node, int]] = []
        self._masks_at_head_scale = 0

    # -- up: from the softmax's input to the scores product
    def up(self) -> bool:
        """Walks up from the softmax's input past everything applied to the scores, leaving in
        `scores` the node they were applied to (the product, if this is attention)."""
        x, below = self.scores, self.sm  # `below`: the node that reads x
        shift = row_max_shift(x)  # `softmax(x - rowmax(x))`: the softmax's own no-op
        if shift is not None:
            x, nodes, unread = shift
            self.interior += nodes
            self.fills.update(unread)  # (like an in-place fill's result: not read)
            self.row_max_src, below = x, nodes[0]
        cat = sink_concat(x)  # attention sinks: a column of per-head logits beside the scores
        if cat is not None:
            scores, self.sinks, self.sink_last = cat
            # the concatenation and the sinks' expand go with the site (the op takes the
            # per-head tensor itself)
            self.interior += [x, *(a for a in node_arg(x, 0, "tensors") if a is not scores)]
            x, below = scores, x
        while isinstance(x, fx.Node):
            u = fill_in_place(x, below)
            if u is not None:  # `s.masked_fill_(mask, v)` before `below` reads s: s's mask
                self.masks.append(("masked_fill", node_arg(u, 1, "mask"), node_arg(u, 2, "value")))
                self.interior.append(u)
                self.fills.add(u)
            below = x
            nxt = self._step_up(x)
            if nxt is _STOP:
                break
            if nxt is None:
                return False
            self.interior.append(x)
            x = nxt
        if self.head_scales and len(self.masks) != self._masks_at_head_scale:
            self.problems.append(
                "a mask or bias is applied to the scores before a per-head factor (the kernels "
                "would need it scaled per head)"
            )
        self.scores = x
        return isinstance(x, fx.Node)

    def _step_up(self, x: fx.Node) -> Any:
        """The node above x when x is a step the walk takes (recording it), None where x ends
        the match, `_STOP` where x is not such a step (then x should be the product)."""
        if is_float32_cast(x):
            return x.args[0]
        if is_fn(x, MASKED_FILL_FNS, ("masked_fill", "masked_fill_")):
            fill = scalar_number(node_arg(x, 2, "value"))
            self.masks.append(("masked_fill", node_arg(x, 1, "mask"), fill))
            return x.args[0]
        if is_fn(x, MUL_FNS | DIV_FNS, ("mul", "div", "mul_", "div_")):
            try:
                nxt = peel_one_scale(x, self.terms)
                return nxt if nxt is not None else self._head_scale(x)
            except Skip as e:
                self.problems.append(str(e))
                ins = [a for a in x.args[:2] if isinstance(a, fx.Node) and leads_to_product(a)]
                return ins[0] if ins else None
        if is_fn(x, ADD_FNS, ("add", "add_", "sub")) and len(x.args) == 2 and not x.kwargs:
            return self._added(x)
        if is_fn(x, {torch.where}, ("where",)) and len(x.args) == 3 and not x.kwargs:
            cond, a, b = x.args
            for how, scores, fill in (("where_keep", a, b), ("where_mask", b, a)):
                fill = scalar_number(fill)
                if not is_tensor_node(fill) and leads_to_product(scores):
                    self.masks.append((how, cond, fill))
                    return scores
            return None
        if self.unflat is None and unflatten_src(x) is not None:
            out = example_value(x)
            self.unflat, self.masks_4d = (out.shape[0], out.shape[1]), len(self.masks)
            return x.args[0]
        if self.softcap is None and is_fn(x, TANH_FNS, ("tanh",)) and len(x.args) == 1:
            return self._tanh(x)
        return _STOP

    def _added(self, x: fx.Node) -> Any:
        """`scores + bias`, `bias + scores` or `scores - bias`: the bias recorded as a mask."""
        tensors = [a for a in x.args[:2] if isinstance(a, fx.Node) and is_tensor_node(a)]
        if len(tensors) != 2:
            return None
        nxt = tensors[1] if leads_to_product(tensors[1]) else tensors[0]
        # The sign matters: `scores - bias` is the additive mask -bias; `bias - scores`
        # negates the scores, which no kernel computes.
        sub = is_fn(x, SUB_FNS, ("sub",))
        if sub and nxt is tensors[1]:
            self.problems.append(
                "the scores are subtracted from a tensor (negated scores); left to Inductor"
            )
        bias = tensors[0] if nxt is tensors[1] else tensors[1]
        self.masks.append(("sub" if sub else "add", bias, None))
        self.add_terms[len(self.masks) - 1] = len(self.terms)
        return nxt

    def _head_scale(self, x: fx.Node) -> Any:
        """`scores * t` or `scores / t` with t one value per head (`core.head_factor`): t
        recorded, the scores returned; None where x is not such a product. Its factor must
        come before every mask (checked at the end of the walk up) and inside any softcap:
        the kernels apply the scale first."""
        for scores in x.args[:2]:
            factor = head_factor(x, scores)
            if factor is not None and leads_to_product(scores):
                self.head_scales.append(factor)
                self._masks_at_head_scale = len(self.masks)
                return scores
        return None

    def _tanh(self, x: fx.Node) -> Any:
        """A softcap's tanh: the factors met above it made the cap, those below are the scale."""
        if self.head_scales:
            self.problems.append("a per-head factor applied after the softcap's tanh")
        inner: list[Any] = []
        arg = x.args[0]
        if not isinstance(arg, fx.Node):
            return None
        nxt = peel_one_scale(arg, inner)
        if nxt is None:  # tanh of the bare scores: no cap to take out again
            return None
        try:
            last_add = max(self.add_terms.values(), default=None)
            self.softcap = softcap_of(self.terms, inner[0], last_add)
        except Skip as e:
            self.problems.append(str(e))
            self.softcap = 1.0
        self.terms.clear()
        self.masks_at_cap = len(self.masks)
        self.interior.append(arg)
        return nxt

    # -- the scores product
    def product(self) -> bool:
        """Whether `scores` is Q K^T (a matmul, or BLOOM's baddbmm with its bias and alpha)."""
        x = self.scores
        prod = split_scores_product(x)
        self.baddbmm = split_baddbmm(x) if prod is None else None
        if self.baddbmm is not None:
            self._baddbmm()
        elif prod is None:
            return False
        else:
            self.kind, self.q_side, self.k_side, self.transposed = prod
        self.interior.append(x)
        return True

    def _baddbmm(self) -> None:
        """bias.baddbmm(q, k^T, beta=, alpha=): beta * bias + alpha * q @ k^T, the bias added
        after the scale alpha (HF BLOOM's ALiBi, unscaled, beside its scaled scores)."""
        bias, self.q_side, self.k_side, beta, alpha = self.baddbmm
        beta = guarded_number(beta)
        alpha = alpha if guarded_number(alpha) is None else guarded_number(alpha)
        self.kind, self.transposed = "baddbmm", True
        if beta is None:
            self.problems.append("baddbmm's beta is not a Python number")
        elif beta != 0:  # beta=0: the bias is ignored (PyTorch's rule)
            if beta != 1:
                self.problems.append(f"baddbmm scales its bias by beta={beta!r} (1 is supported)")
            if not (isinstance(bias, fx.Node) and is_tensor_node(bias)):
                self.problems.append("baddbmm's bias is not a tensor")
            self.masks.append(("add", bias, None))
            self.add_terms[len(self.masks) - 1] = len(self.terms)
        if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha == 1):
            self.terms.append((alpha, 1))

    # -- down: from the softmax to the value product
    def down(self) -> bool:
        """Walks down through a cast back, BLOOM's view back and dropout to P V."""
        p = self.sm
        while True:
            users = list(p.users)
            products = [(u, split_value_product(u, p)) for u in users]
            products = [(u, vv) for u, vv in products if vv is not None]
            if products:
                if self.sinks is not None and not self.sink_dropped:
                    return False  # (a product over the sink column too: not attention)
                if len(users) != 1:
                    self.problems.append(
                        "the attention probabilities are also used outside the attention (e.g. "
                        "returned as attention weights); flashgen never materialises them"
                    )
                self.out, self.v = products[0]
                self.probs = p
                return True
            if len(users) != 1:
                return False
            (u,) = users
            if not self._step_down(u, p):
                return False
            self.interior.append(u)
            p = u

    def _step_down(self, u: fx.Node, p: fx.Node) -> bool:
        if is_float32_cast(u):
            return True
        if self.sinks is not None and not self.sink_dropped:
            self.sink_dropped = drops_sink_column(u, p, self.sink_last)
            return self.sink_dropped
        if self.unflat is not None and not self.merged and flattens(u, *self.unflat) is not None:
            self.merged = True
            return True
        if is_fn(u, DROPOUT_FNS, ("dropout",)):
            training = node_arg(
                u, 2, "training" if u.target is not torch.dropout else "train", True
            )
            try:
                self.drop_p = dropout_prob(node_arg(u, 1, "p", 0.5), training, "attention dropout")
            except Skip as e:
                self.problems.append(str(e))
            return True
        return False

    # -- the operands
    def operands(self) -> tuple[Any, Any, Any]:
        """(q, k, v) under their scales (into `terms`), k's transpose and BLOOM's flattening,
        after checking that nothing between the softmax and the products is used elsewhere."""
        self._used_once()
        q = peel_scale(self.q_side, self.terms) if isinstance(self.q_side, fx.Node) else self.q_side
        if self.transposed:
            kt = peel_scale(self.k_side, self.terms)
            k = _transpose_base(kt)
            if k is None:
                self.problems.append(
                    "the key operand of Q @ K^T is not a transpose of the last two dims "
                    "(k.transpose(-2, -1), k.mT, permute); left to Inductor"
                )
                k = kt
            k = peel_scale(k, self.terms)
        else:
            k = peel_scale(self.k_side, self.terms)
        v = self.v
        q, k = self._under_upcasts(q, k, v)
        if self.unflat is None:
            return q, k, v
        # The flattened q, k, v are [B, H, T, D] tensors viewed as [B * H, T, D]: the op gets
        # those, and its output is flattened back (`Match.flat_out`).
        if not self.merged:
            self.problems.append(
                "the scores are viewed as [batch, heads, ...] but the probabilities are not "
                "viewed back for the value product"
            )
            return q, k, v
        flat = [flattens(t, *self.unflat) for t in (q, k, v)]
        if any(t is None for t in flat):
            self.problems.append(
                "q, k or v of the flattened [batch x heads] product is not a view of a "
                "[batch, heads, seq, dim] tensor"
            )
            return q, k, v
        return flat[0], flat[1], flat[2]

    def _under_upcasts(self, q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        """q and k from under a cast of both up to float32 from the values' dtype, float16 or
        bfloat16 (HF GPT-J and CodeGen: `query.to(torch.float32)`, `key.to(torch.float32)`
        before the scores product, the probabilities cast back to the values' dtype before P V),
        with any scale factor under the casts; otherwise q and k as they are (whose dtypes then
        decide, as before). The kernels compute the scores from the low-precision operands as
        that float32 product does: each product of two float16 or bfloat16 numbers is exact in
        float32 and the sums are float32 (the order of the sum differs, as with any kernel), and
        they cast the probabilities to the values' dtype for P V. The operands' gradients then
        come out in their own dtype, where eager casts float32 ones down."""
        below = [upcast_source(t) for t in (q, k)]
        if below[0] is None or below[1] is None or not isinstance(v, fx.Node):
            return q, k
        dtypes = {getattr(example_value(t), "dtype", None) for t in (*below, v)}
        if len(dtypes) != 1:
            return q, k
        return peel_scale(below[0], self.terms), peel_scale(below[1], self.terms)

    def _used_once(self) -> None:
        """A problem where an intermediate of the attention is read outside it."""
        fills, x = self.fills, self.scores
        for n in self.interior:
            if n in fills:  # (an in-place fill's result is not read)
                continue
            ends = n is self.sm or n is x or n is self.probs  # (their uses are checked apart)
            if n is self.row_max_src and not ends:  # read by the shift's max and subtraction
                ends = set(n.users) <= set(self.interior)
                if not ends:
                    self.problems.append(
                        f"an intermediate of the attention ({n.name}) is also used elsewhere; "
                        "flashgen never materialises the attention matrix"
                    )
                    break
            if not ends and len(n.users.keys() - fills - _meta_reads(n)) != 1:
                self.problems.append(
                    f"an intermediate of the attention ({n.name}) is also used elsewhere; "
                    "flashgen never materialises the attention matrix"
                )
                break
        readers = x.users.keys() - fills - _meta_reads(x)
        if x is self.row_max_src:  # `softmax(s - rowmax(s))` of the bare scores
            readers = readers - set(self.interior)
        if len(readers) != (0 if x is self.row_max_src else 1):
            self.problems.append("the attention scores are also used outside the attention")


def _meta_reads(n: fx.Node) -> set[fx.Node]:
    """The users of n that read only its shape or dtype: HF XLM's `mask.expand_as(scores)` and
    `softmax(scores.float()).type_as(scores)` (`mask_reading.mask_tensor` hands the op the mask
    before its expand_as, so the scores are not computed for their shape); and a folded
    chain's old node (`window_views`), gone if the site is replaced."""
    return {
        u for u in n.users
        if (is_fn(u, set(), ("type_as", "expand_as")) and u.args[1:] == (n,) and u.args[0] is not n)
        or u.meta.get(FOLDED_AWAY)
    }  # fmt: skip


_STOP = object()  # `SoftmaxWalk._step_up`: not a step of the walk (the product, or not attention)


def leads_to_product(n: Any) -> bool:
    """Whether `n` is the scores product, reached through the ops the walk goes up through
    (casts, scales, a softcap's tanh, views, masks and added biases): so that a `torch.where`
    or an add can tell the scores' side from the mask's or the bias's side whatever was applied
    to the scores first (e.g. ALiBi added, then a window's `where`)."""
    while isinstance(n, fx.Node):
        if split_scores_product(n) is not None or split_baddbmm(n) is not None:
            return True
        if unflatten_src(n) is not None:
            n = n.args[0]
            continue
        if is_float32_cast(n) or is_fn(n, MUL_FNS | DIV_FNS | TANH_FNS, ("mul", "div", "tanh")):
            ins = [a for a in n.args[:2] if isinstance(a, fx.Node) and is_tensor_node(a)]
            if len(ins) == 2:  # scores times a per-head factor (`core.head_factor`)
                return any(head_factor(n, a) and leads_to_product(a) for a in ins)
            n = ins[0] if len(ins) == 1 else None
            continue
        if is_fn(n, MASKED_FILL_FNS, ("masked_fill", "masked_fill_")):
            n = n.args[0]
            continue
        if is_fn(n, ADD_FNS, ("add", "add_", "sub")) or is_fn(n, {torch.where}, ("where",)):
            ins = [a for a in n.args[-2:] if isinstance(a, fx.Node) and is_tensor_node(a)]
            return any(leads_to_product(a) for a in ins)
        return False
    return False


def is_float32_cast(n: Any) -> bool:
    """Casts an upcast may use; checked by dtype on the example values, not by spelling."""
    if not (n.op == "call_method" and n.target in CAST_METHODS) and not (
        n.op == "call_function" and n.target in (torch.Tensor.float, torch.Tensor.to)
    ):
        return False
    src, dst = example_value(n.args[0]), example_value(n)
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
        return False
    return src.shape == dst.shape and src.device == dst.device and dst.is_floating_point()


def upcast_source(n: Any) -> Any:
    """x where `n` is x cast up to float32 from float16 or bfloat16 (by any spelling
    `is_float32_cast` knows), else None."""
    if not (isinstance(n, fx.Node) and is_float32_cast(n)):
        return None
    src, dst = example_value(n.args[0]), example_value(n)
    if dst.dtype == torch.float32 and src.dtype in (torch.float16, torch.bfloat16):
        return n.args[0]
    return None


def fill_in_place(x: fx.Node, reader: fx.Node) -> fx.Node | None:
    """The one `x.masked_fill_(mask, value)` that runs before `reader` reads x (the in-place
    spelling of a mask on the scores), when x has exactly that one besides its readers; None
    otherwise (any other in-place use of x leaves it with a user the walk does not know, which
    the user counts in `SoftmaxWalk.operands` refuse)."""
    fills = [
        u for u in x.users
        if u.op == "call_method" and u.target == "masked_fill_" and u.args and u.args[0] is x
    ]  # fmt: skip
    if len(fills) != 1 or fills[0].users:
        return None
    u = fills[0]
    n = u.next  # graph order is program order: the fill must come before the read
    while n is not reader and n.op != "root":
        n = n.next
    return u if n is reader else None


def softcap_of(outer: list[Any], inner: tuple[Any, int], terms_at_add: int | None) -> float:
    """The cap of `cap * tanh(scores / cap)`: `outer` the scale factors met between the tanh and
    the softmax, `inner` the one factor under the tanh (`/ cap` or `* (1 / cap)`), as
    `peel_one_scale` records them; both Python numbers making the same positive cap. Skip
    otherwise, or when an additive mask met on the way (`terms_at_add`) is scaled by the cap's
    factor (added inside `cap * (...)`), which the kernels cannot compute."""
    if terms_at_add is not None and terms_at_add > 0:
        raise Skip("an additive mask is added between the softcap's tanh and its factor")

    def number(term: tuple[Any, int]) -> float:
        c, power = term
        c = guarded_number(c)
        if c is None or c == 0:
            raise Skip("the softcap's factor is not a nonzero Python number")
        return float(c) if power > 0 else 1.0 / float(c)

    if not outer:
        raise Skip("tanh of the scores without a cap factor after it (not a softcap)")
    cap = math.prod(number(t) for t in outer)
    below = 1.0 / number(inner)
    if not (cap > 0 and math.isfinite(cap) and math.isclose(cap, below, rel_tol=1e-6)):
        raise Skip(
            f"tanh of the scores scaled by 1/{below:g} then by {cap:g}: a softcap needs "
            "cap * tanh(scores / cap) with one positive cap"
        )
    return cap
