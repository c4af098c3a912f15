"""Recognisers: hand-written attention (walked from its softmax) and
F.scaled_dot_product_attention. Each returns a Match or raises Skip with a reason."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx

from .alibi import prove_alibi
from .core import (
    ADD_FNS,
    CAST_METHODS,
    DIV_FNS,
    DROPOUT_FNS,
    MASKED_FILL_FNS,
    MUL_FNS,
    NEAR_NEG_INF,
    SOFTMAX_FNS,
    SUB_FNS,
    TANH_FNS,
    Match,
    Site,
    Skip,
    _transpose_base,
    dropout_prob,
    example_value,
    flattens,
    guarded_number,
    is_fn,
    is_tensor_node,
    known_eq,
    location,
    node_arg,
    peel_one_scale,
    peel_scale,
    split_baddbmm,
    split_scores_product,
    split_value_product,
    unflatten_src,
)
from .mask_values import Values
from .masks import prove_structure


def _leads_to_product(n: Any) -> bool:
    """Whether `n` is the scores product, reached through the ops the walk in `match_softmax`
    goes up through (casts, scales, a softcap's tanh, views, masks and added biases): so that
    a `torch.where` or an add can tell the scores' side from the mask's or the bias's side
    whatever was applied to the scores first (e.g. ALiBi added, then a window's `where`)."""
    while isinstance(n, fx.Node):
        if split_scores_product(n) is not None or split_baddbmm(n) is not None:
            return True
        if unflatten_src(n) is not None:
            n = n.args[0]
            continue
        if _is_float32_cast(n) or is_fn(n, MUL_FNS | DIV_FNS | TANH_FNS, ("mul", "div", "tanh")):
            ins = [a for a in n.args[:2] if isinstance(a, fx.Node) and is_tensor_node(a)]
            n = ins[0] if len(ins) == 1 else None
            continue
        if is_fn(n, MASKED_FILL_FNS, ("masked_fill", "masked_fill_")):
            n = n.args[0]
            continue
        if is_fn(n, ADD_FNS, ("add", "add_", "sub")) or is_fn(n, {torch.where}, ("where",)):
            ins = [a for a in n.args[-2:] if isinstance(a, fx.Node) and is_tensor_node(a)]
            return any(_leads_to_product(a) for a in ins)
        return False
    return False


def is_softmax(n: Any) -> bool:
    return is_fn(n, SOFTMAX_FNS, ("softmax",))


def _is_float32_cast(n: Any) -> bool:
    """Casts an upcast may use; checked by dtype on the example values, not by spelling."""
    if not (n.op == "call_method" and n.target in CAST_METHODS) and not (
        n.op == "call_function" and n.target in (torch.Tensor.float, torch.Tensor.to)
    ):
        return False
    src, dst = example_value(n.args[0]), example_value(n)
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
        return False
    return src.shape == dst.shape and src.device == dst.device and dst.is_floating_point()


def softmax_dim_ok(n: Any) -> bool:
    dim = node_arg(n, 1, "dim")
    nd = example_value(n).dim()
    return isinstance(dim, int) and dim % nd == nd - 1


def match_softmax(sm: Any, values: Values) -> Match | None:
    """Walk up from a softmax to Q K^T and down to P V. None if this is not attention."""
    problems: list[str] = []
    interior: list[fx.Node] = [sm]
    terms: list[Any] = []
    masks: list[tuple[str, Any, Any]] = []
    # for each additive mask, by its index in masks: the scale factors met walking up from the
    # softmax before it (0: added after every scale factor)
    add_terms: dict[int, int] = {}
    # HF BLOOM: 3-D scores [B * H, Sq, Sk] viewed as [B, H, Sq, Sk] on the way to the softmax
    # ((B, H), and how many masks were met above the view, in the 4-D space)
    unflat: tuple[Any, Any] | None = None
    masks_4d = 0
    # logit softcapping, cap * tanh(scores / cap) (Gemma-2): the cap, and how many masks were met
    # above the tanh (those come after the softcap, as the kernels apply them)
    softcap: float | None = None
    masks_at_cap = 0
    x = sm.args[0] if sm.args else sm.kwargs.get("input")
    fills: set[fx.Node] = set()  # in-place masked_fill_ calls taken as masks (`_fill_in_place`)
    below = sm  # the node that reads x
    # Up: casts, masked_fill, scale, a softcap's tanh and additive masks, in any order.
    while isinstance(x, fx.Node):
        u = _fill_in_place(x, below)
        if u is not None:  # `s.masked_fill_(mask, v)` before `below` reads s: s's mask
            masks.append(("masked_fill", node_arg(u, 1, "mask"), node_arg(u, 2, "value")))
            interior.append(u)
            fills.add(u)
        below = x
        if _is_float32_cast(x):
            nxt = x.args[0]
        elif is_fn(x, MASKED_FILL_FNS, ("masked_fill", "masked_fill_")):
            masks.append(("masked_fill", node_arg(x, 1, "mask"), node_arg(x, 2, "value")))
            nxt = x.args[0]
        elif is_fn(x, MUL_FNS | DIV_FNS, ("mul", "div", "mul_", "div_")):
            try:
                got = peel_one_scale(x, terms)
            except Skip as e:
                problems.append(str(e))
                ins = [a for a in x.args[:2] if isinstance(a, fx.Node) and _leads_to_product(a)]
                got = ins[0] if ins else None
            if got is None:
                return None
            nxt = got
        elif is_fn(x, ADD_FNS, ("add", "add_", "sub")) and len(x.args) == 2 and not x.kwargs:
            tensors = [a for a in x.args[:2] if isinstance(a, fx.Node) and is_tensor_node(a)]
            if len(tensors) != 2:
                return None
            nxt = tensors[1] if _leads_to_product(tensors[1]) else tensors[0]
            # The sign matters: `scores - bias` is the additive mask -bias; `bias - scores`
            # negates the scores, which no kernel computes.
            sub = is_fn(x, SUB_FNS, ("sub",))
            if sub and nxt is tensors[1]:
                problems.append(
                    "the scores are subtracted from a tensor (negated scores); left to Inductor"
                )
            bias = tensors[0] if nxt is tensors[1] else tensors[1]
            masks.append(("sub" if sub else "add", bias, None))
            add_terms[len(masks) - 1] = len(terms)
        elif is_fn(x, {torch.where}, ("where",)) and len(x.args) == 3 and not x.kwargs:
            cond, a, b = x.args
            if _leads_to_product(a) and not is_tensor_node(b):
                nxt = a
                masks.append(("where_keep", cond, b))
            elif _leads_to_product(b) and not is_tensor_node(a):
                nxt = b
                masks.append(("where_mask", cond, a))
            else:
                return None
        elif unflat is None and unflatten_src(x) is not None:
            out = example_value(x)
            unflat, masks_4d = (out.shape[0], out.shape[1]), len(masks)
            nxt = x.args[0]
        elif softcap is None and is_fn(x, TANH_FNS, ("tanh",)) and len(x.args) == 1:
            inner: list[Any] = []
            arg = x.args[0]
            nxt = peel_one_scale(arg, inner) if isinstance(arg, fx.Node) else None
            if nxt is None:  # tanh of the bare scores: no cap to take out again
                return None
            try:
                softcap = _softcap(terms, inner[0], max(add_terms.values(), default=None))
            except Skip as e:
                problems.append(str(e))
                softcap = 1.0
            # The factors above the tanh made the cap; those below it are the scale.
            terms.clear()
            masks_at_cap = len(masks)
            interior.append(arg)
        else:
            break
        interior.append(x)
        x = nxt
    if not isinstance(x, fx.Node):
        return None
    prod = split_scores_product(x)
    baddbmm = split_baddbmm(x) if prod is None else None
    if baddbmm is not None:
        # bias.baddbmm(q, k^T, beta=, alpha=): beta * bias + alpha * q @ k^T, the bias added
        # after the scale alpha (HF BLOOM's ALiBi, unscaled, beside its scaled scores)
        bias, q_side, k_side, beta, alpha = baddbmm
        beta = guarded_number(beta)
        alpha = alpha if guarded_number(alpha) is None else guarded_number(alpha)
        kind, transposed = "baddbmm", True
        if beta is None:
            problems.append("baddbmm's beta is not a Python number")
        elif beta != 0:  # beta=0: the bias is ignored (PyTorch's rule)
            if beta != 1:
                problems.append(f"baddbmm scales its bias by beta={beta!r} (1 is supported)")
            if not (isinstance(bias, fx.Node) and is_tensor_node(bias)):
                problems.append("baddbmm's bias is not a tensor")
            masks.append(("add", bias, None))
            add_terms[len(masks) - 1] = len(terms)
        if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha == 1):
            terms.append((alpha, 1))
    elif prod is None:
        return None
    else:
        kind, q_side, k_side, transposed = prod
    interior.append(x)

    # Down: optional cast back, dropout, then P @ V.
    p = sm
    v = None
    drop_p = 0.0
    merged = False  # BLOOM: the probabilities viewed back as [B * H, Sq, Sk] for bmm
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
        elif unflat is not None and not merged and flattens(u, *unflat) is not None:
            merged = True
        elif is_fn(u, DROPOUT_FNS, ("dropout",)):
            training = node_arg(
                u, 2, "training" if u.target is not torch.dropout else "train", True
            )
            try:
                drop_p = dropout_prob(node_arg(u, 1, "p", 0.5), training, "attention dropout")
            except Skip as e:
                problems.append(str(e))
        else:
            return None
        interior.append(u)
        p = u
    site = Site(kind=kind, location=location(sm))

    # Upstream side of the products: pre-applied scales, transposes, GQA repeats.
    for n in interior:
        if n in fills:  # (an in-place fill's result is not read)
            continue
        if n is not sm and n is not x and n is not p and len(n.users.keys() - fills) != 1:
            problems.append(
                f"an intermediate of the attention ({n.name}) is also used elsewhere; "
                "flashgen never materialises the attention matrix"
            )
            break
    if len(x.users.keys() - fills) != 1:
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
    if unflat is not None:
        # The flattened q, k, v are [B, H, T, D] tensors viewed as [B * H, T, D]: the op gets
        # those, and its output is flattened back (`Match.flat_out`).
        if not merged:
            problems.append(
                "the scores are viewed as [batch, heads, ...] but the probabilities are not "
                "viewed back for the value product"
            )
        else:
            flat = [flattens(t, *unflat) for t in (q, k, v)]
            if any(t is None for t in flat):
                problems.append(
                    "q, k or v of the flattened [batch x heads] product is not a view of a "
                    "[batch, heads, seq, dim] tensor"
                )
            else:
                q, k, v = flat

    causal = False
    window = None
    align = "top_left"
    tensor_mask = None
    hides = None  # a boolean mask read as a tensor: True where it hides a key (or keeps one)
    rows_from = None  # the whole mask, where the kernels read only its per-key part
    key_bias = None  # `_bias_beside_mask`'s bias (attn_mask is then its boolean mask's keys)
    alibi = None
    not_alibi = ""
    if len(masks) == 2 or (len(masks) == 1 and masks[0][0] in ("add", "sub")):
        # an ALiBi bias (beside a causal mask, or alone): the kernels compute it
        for i, (how, node, _) in enumerate(masks):
            if how in ("add", "sub") and add_terms.get(i) == 0:
                in_3d = unflat is not None and i >= masks_4d  # added to the 3-D scores
                try:
                    alibi = _alibi(
                        how, node, x, 4 if unflat is not None and not in_3d else None,
                        unflat[1] if unflat is not None and in_3d else None,
                    )  # fmt: skip
                except Skip as e:
                    if baddbmm is not None and node is baddbmm[0]:
                        not_alibi = f"; baddbmm's bias is not ALiBi ({e})"
                    continue
                masks = masks[:i] + masks[i + 1 :]
                add_terms = {j - (j > i): t for j, t in add_terms.items() if j != i}
                break
    if softcap is not None and len(masks) > masks_at_cap:
        problems.append(
            "a mask or bias is applied to the scores inside the softcap's tanh; the kernels "
            "apply it after the softcap"
        )
    elif len(masks) == 2:
        try:  # a bias beside a boolean mask (BLOOM: its ALiBi from the padding, HF's mask)
            both = _bias_beside_mask(masks, add_terms, x, values, drop_p, unflat, masks_4d)
        except Skip as e:
            try:  # two floating biases (T5's under checkpointing): read as their sum
                tensor_mask, key_bias = _two_biases(masks, add_terms, unflat)
            except Skip as e2:
                problems.append(
                    "more than one mask is applied to the scores; only one causal mask is, a "
                    f"bias beside one boolean mask ({e}), or two floating biases ({e2})" + not_alibi
                )
        else:
            (causal, window, align), tensor_mask, hides, key_bias, rows_from = both
    elif len(masks) > 2:
        problems.append("more than two masks are applied to the scores" + not_alibi)
    elif masks:
        try:
            if masks[0][0] == "sub":
                raise Skip("a subtracted mask is not proven causal; it is read as a negated bias")
            causal, window, align = _check_causal(masks[0], x, values)
        except Skip as e:
            se = example_value(x)
            split = _additive_split(
                masks[0], add_terms.get(0), drop_p, unflat, values, se.shape[-2], se.shape[-1]
            )
            if split is not None:  # HF's eager padded batch: + where(causal & keep, 0, min)
                (causal, window, align), tensor_mask, rows_from = split
                hides = False
            else:
                try:  # an additive bias (ALiBi, T5's): the kernel reads the tensor as it is
                    added = _additive_bias(masks[0], add_terms.get(0))
                    if unflat is not None:  # (a mask tensor in BLOOM's layout: not supported)
                        raise Skip("an additive mask beside [batch x heads]-flattened scores")
                    tensor_mask = added
                except Skip:
                    try:  # a boolean mask filled with finfo.min (HF's padded batch)
                        read = _read_hiding(masks[0], drop_p, unflat, values, *se.shape[-2:])
                    except Skip as e2:
                        problems.append(str(e) + not_alibi + _refused_as_tensor(masks[0], e2))
                    else:
                        structure, tensor_mask, hides, rows_from = read
                        if structure is not None:  # `causal & keep` by hand
                            causal, window, align = structure
    m = Match(site, q, k, v, out, causal, terms, interior=interior, window=window, align=align)
    m.attn_mask = tensor_mask
    if hides is not None:
        m.mask_hides, m.empty_rows, m.rows_from = hides, v, rows_from
    m.mask_negated = tensor_mask is not None and masks[0][0] == "sub"
    m.alibi = alibi
    m.key_bias = key_bias
    m.dropout_p = drop_p
    m.softcap = softcap
    m.three_d = example_value(q).dim() == 3
    m.flat_out = unflat is not None
    if problems:
        raise Skip(problems[0])
    return m


def _fill_in_place(x: fx.Node, reader: fx.Node) -> fx.Node | None:
    """The one `x.masked_fill_(mask, value)` that runs before `reader` reads x (the in-place
    spelling of a mask on the scores), when x has exactly that one besides its readers; None
    otherwise (any other in-place use of x leaves it with a user the walk does not know, which
    the user counts in `match_softmax` refuse)."""
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


def _softcap(outer: list[Any], inner: tuple[Any, int], terms_at_add: int | None) -> float:
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


def _alibi(
    how: str, bias: Any, scores: Any, dim: int | None = None, heads: Any = None
) -> tuple[Any, float]:
    """(slopes node, factor) of a bias added (or subtracted) after the scale that is ALiBi
    (`alibi.prove_alibi`; `dim`: the scores' dims where the bias is added, when not those of
    the product; `heads`: H of scores flattened to [B * H, Sq, Sk]); Skip otherwise."""
    se = example_value(scores)
    slopes, c = prove_alibi(bias, se.shape[-1], dim or se.dim(), heads)
    return slopes, (-c if how == "sub" else c)


def _additive_bias(mask: tuple[str, Any, Any], terms_at_add: int | None) -> Any:
    """The tensor of `scores (* scale) + bias` (or `- bias`: the rewrite negates it,
    `Match.mask_negated`) as the kernels' additive attn_mask: a floating tensor added after
    every scale factor (`terms_at_add`: the scale factors met walking up from the softmax
    before the add, i.e. applied after it: a bias they scale is not the kernels' bias); Skip
    otherwise."""
    how, node, _ = mask
    if how not in ("add", "sub"):
        raise Skip("not an additive mask")
    if terms_at_add is None or terms_at_add > 0:
        raise Skip("the additive mask is added before the scores are scaled")
    bias = _tensor_mask(node)
    if example_value(bias).dtype == torch.bool:
        raise Skip("a boolean tensor added to the scores")
    return bias


def _hiding_mask(mask: tuple[str, Any, Any], drop_p: float, unflat: Any) -> tuple[Any, bool]:
    """(mask node, hides) for a boolean mask that `masked_fill`/`torch.where` applies with a
    finite fill at or below NEAR_NEG_INF (HF's finfo.min; `hides`: True marks a hidden key, as
    in masked_fill): the kernels read it as an attn_mask tensor, data whatever it holds, so no
    proof is needed (HF's padded batch: causal and key padding from the attention_mask input).
    A key it hides gets the fill, whose exp underflows to 0 beside any visible key (the rule
    every masked_fill mask follows here); a row it hides entirely gets the fill on every key
    in eager, a uniform softmax: the mean of v over all the keys, which the rewrite puts on
    those rows (`Match.empty_rows`; the kernels give them zeros and no gradient, and the mean
    carries v's gradient as eager's uniform row does). Skip otherwise."""
    how, node, fill = mask
    if how not in ("masked_fill", "where_keep", "where_mask"):
        raise Skip("not a boolean mask")
    if not (isinstance(node, fx.Node) and example_value(node).dtype == torch.bool):
        raise Skip("the mask is not a boolean tensor")
    if (
        isinstance(fill, bool)
        or not isinstance(fill, (int, float))
        or not math.isfinite(fill)
        or fill > NEAR_NEG_INF
    ):
        raise Skip(
            f"its fill {fill!r} is not a finite value at or below finfo(float16).min (with "
            "-inf a fully masked row is NaN in eager, which the kernels do not give)"
        )
    if drop_p:
        raise Skip("dropout on the rows it hides entirely is not reproduced")
    if unflat is not None:
        raise Skip("beside [batch x heads]-flattened scores")
    return _tensor_mask(node), how != "where_keep"


# A fill that absorbs any score added to it: fill + s == fill in float32 (and bfloat16) for
# every |s| below 2**99, so a row it hides entirely is uniform in eager whatever was added
# (finfo(float32).min and finfo(bfloat16).min are below it; finfo(float16).min is not).
ABSORBING_FILL = -(2.0**100)
_ZERO_FNS = {torch.zeros, torch.zeros_like, torch.Tensor.new_zeros}


def _is_zero(a: Any) -> bool:
    """Whether `a` is 0: a Python number, a tensor node made by zeros / zeros_like /
    new_zeros, or `torch.tensor(0.0)` / `torch.scalar_tensor(0)` (HF's mask builders add
    `where(keep, torch.zeros(()), finfo.min)`, transformers 5.17 `torch.tensor(0.0)`)."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return a == 0
    if not isinstance(a, fx.Node):
        return False
    if is_fn(a, {torch.tensor, torch.scalar_tensor}) and len(a.args) == 1:
        return _is_zero(a.args[0])
    return is_fn(a, _ZERO_FNS, ("new_zeros", "zero_"))


def _as_hiding(mask: tuple[str, Any, Any], terms_at: int | None):
    """The boolean mask that an additive mask of 0 and a fill applies, as the walk records
    `torch.where` / `masked_fill` masks (("where_keep" | "where_mask" | "masked_fill", mask,
    fill)), when added after every scale factor (`terms_at` 0) with an ABSORBING_FILL: then
    scores + it equals `where(keep, scores, fill)` exactly (a hidden key's score is the fill,
    a kept one's s + 0). Its spellings: `where(keep, 0, fill)` (HF's masking_utils; or
    `where(hide, fill, 0)`), `zeros.masked_fill(hide, fill)`, and `(1 - keep.to(dtype)) * fill`
    with `keep` boolean (so 0 or 1: HF's older extended masks, from a boolean mask). None for
    anything else."""
    how, node, _ = mask
    if how != "add" or terms_at != 0 or not isinstance(node, fx.Node):
        return None
    ne = example_value(node)
    if not (isinstance(ne, torch.Tensor) and ne.is_floating_point()):
        return None

    def absorbing(fill: Any) -> bool:
        # (finite in the mask's dtype too: float32's min is -inf in bfloat16, and a row hidden
        # whole by -inf is NaN in eager, which the rows' mean would not reproduce)
        if not (isinstance(fill, float) and -math.inf < fill <= ABSORBING_FILL):
            return False
        return math.isfinite(float(torch.tensor(fill, dtype=ne.dtype)))

    if is_fn(node, {torch.where}, ("where",)) and len(node.args) == 3 and not node.kwargs:
        cond, a, b = node.args
        if _is_bool(cond):
            for kind, zero, fill in (("where_keep", a, b), ("where_mask", b, a)):
                if _is_zero(zero) and absorbing(fill):
                    return (kind, cond, fill)
        return None
    if is_fn(node, MASKED_FILL_FNS, ("masked_fill",)) and len(node.args) == 3:
        base, hide, fill = node.args
        if _is_zero(base) and _is_bool(hide) and absorbing(fill):
            return ("masked_fill", hide, fill)
        return None
    if is_fn(node, MUL_FNS, ("mul",)) and len(node.args) == 2 and not node.kwargs:
        for inv, fill in (node.args, node.args[::-1]):
            keep = _one_minus_bool(inv)
            if keep is not None and absorbing(fill):
                return ("where_keep", keep, fill)
    return None


def _is_bool(a: Any) -> bool:
    ae = example_value(a) if isinstance(a, fx.Node) else None
    return isinstance(ae, torch.Tensor) and ae.dtype == torch.bool


def _one_minus_bool(n: Any) -> Any:
    """`keep` when `n` is `1 - keep.to(<floating dtype>)` (or `.float()`, ...) of a boolean
    `keep`, else None."""
    if not (is_fn(n, SUB_FNS, ("rsub",)) and len(n.args) == 2 and not n.kwargs):
        return None
    one, cast = n.args
    if isinstance(one, bool) or not isinstance(one, (int, float)) or one != 1:
        return None
    if not (isinstance(cast, fx.Node) and cast.op == "call_method" and cast.args):
        return None
    if cast.target not in CAST_METHODS and cast.target != "to":
        return None
    src, ce = cast.args[0], example_value(cast)
    if not (_is_bool(src) and isinstance(ce, torch.Tensor) and ce.is_floating_point()):
        return None
    return src


def _additive_split(mask, terms_at, drop_p, unflat, values, tq, tk):
    """((causal, window, align), keep, rows_from) for one additive mask that is HF's eager
    padded batch, `scores + where(causal & keep, 0, finfo.min)` (`_as_hiding`, then
    `_split_hiding_mask`): the kernels take the causal flag and the per-key `keep` instead of
    reading the N x N tensor; rows it hides whole get eager's uniform softmax
    (`Match.empty_rows`, from rows_from), whose value is the mean of v. Not its gradient with
    respect to q and k: eager's `scores + finfo.min` still passes one there (as the tensor path
    did not either: its kernels give such rows none); those rows are padding, whose outputs
    no kept position reads. None when it is not so (the tensor is read)."""
    hider = _as_hiding(mask, terms_at)
    if hider is None or unflat is not None:
        return None
    try:
        structure, keep, _, rows_from = _read_hiding(hider, drop_p, None, values, tq, tk)
    except Skip:
        return None
    return None if structure is None else (structure, keep, rows_from)


def _bias_beside_mask(masks, add_terms, scores, values, drop_p, unflat, masks_4d):
    """A floating bias added after the scale beside one boolean mask (HF BLOOM with an
    attention_mask: ALiBi whose positions count only the kept keys, which `prove_alibi` does
    not prove, beside HF's additive causal & padding mask). Returns (structure, tensor_mask,
    hides, key_bias, rows_from): the boolean mask proven causal / a band (tensor_mask None),
    split into that and a per-key `keep`, or else read whole (`_hiding_mask`); key_bias is
    (bias node, H) with H the head count to unflatten it by when it was added to BLOOM's
    [B * H, Sq, Sk] scores, else None. The rewrite merges the two into the kernels' additive
    mask `where(keep, bias, -inf)`. A row the mask hides whole is uniform in eager only if the
    fill absorbs the bias added to it, so an additive mask, or one the bias is added after,
    needs an ABSORBING_FILL (and a bias below 2**99 there: one that itself holds finfo.min
    would make such a row eager's softmax over its other keys). Skip otherwise."""
    for bi, hi in ((0, 1), (1, 0)):
        how, bias, _ = masks[bi]
        if how != "add" or add_terms.get(bi) != 0:
            continue
        hider = masks[hi]
        if hider[0] == "add":
            hider = _as_hiding(hider, add_terms.get(hi))
        if hider is None or hider[0] not in ("masked_fill", "where_keep", "where_mask"):
            continue
        break
    else:
        raise Skip("neither is a floating bias added after the scale beside a boolean mask")
    bias = _additive_bias(("add", bias, None), 0)
    in_3d = unflat is not None and bi >= masks_4d  # added to the [B * H, Sq, Sk] scores
    if unflat is not None and hi >= masks_4d:
        raise Skip("a boolean mask applied to the [batch x heads]-flattened scores")
    heads = None
    if in_3d:
        heads = guarded_number(unflat[1])
        if not isinstance(heads, int):
            raise Skip("the flattened scores' head count is not a number")
    fill = hider[2]
    absorbed = isinstance(fill, float) and fill <= ABSORBING_FILL
    if (masks[hi][0] == "add" or bi < hi) and not absorbed:
        raise Skip(
            f"the bias is added to the fill {fill!r}, which does not absorb it (a row hidden "
            "whole would not be uniform)"
        )
    try:
        return _check_causal(hider, scores, values), None, None, (bias, heads), None
    except Skip:
        pass
    structure, tensor, hides, rows_from = _read_hiding(
        hider, drop_p, None, values, *example_value(scores).shape[-2:]
    )
    structure = structure or (False, None, "top_left")
    return structure, tensor, hides, (bias, heads), rows_from


def _two_biases(masks, add_terms, unflat) -> tuple[Any, tuple[Any, None]]:
    """Two floating tensors added to the scores after the scale, neither proven anything (HF
    T5 under gradient checkpointing: its relative position bias and its additive padding mask
    reach a checkpointed layer apart, as inputs): (attn_mask, key_bias) for the rewrite, which
    hands the op their sum, as the kernels read T5's bias and mask summed outside a checkpoint
    (`Match.key_bias`). Exact up to the order of one rounding: eager adds them to the scores
    one after the other. Skip otherwise."""
    if unflat is not None:
        raise Skip("biases added to [batch x heads]-flattened scores")
    first, second = (
        _additive_bias(mask, add_terms.get(i)) if mask[0] == "add" else None
        for i, mask in enumerate(masks)
    )
    if first is None or second is None:
        raise Skip("not both added")
    return first, (second, None)


_NOT_FNS = {torch.logical_not, torch.bitwise_not, operator.invert, torch.Tensor.logical_not}


def _split_hiding_mask(mask: Any, hides: bool, values: Values, tq: Any, tk: Any):
    """`_causal_and_key_mask`'s split of a boolean mask that hand-written attention applies
    with a finite fill (`_hiding_mask`): `causal & keep` under `torch.where`, `~(causal &
    keep)` under `masked_fill` (`hides`), None for anything else (then the whole tensor is
    read). tq, tk: the scores' lengths."""
    if hides:
        if not (
            isinstance(mask, fx.Node) and is_fn(mask, _NOT_FNS, ("logical_not", "bitwise_not"))
        ):
            return None
        mask = mask.args[0]
    return _causal_and_key_mask(mask, values, tq, tk)


def _read_hiding(mask: tuple[str, Any, Any], drop_p: float, unflat: Any, values, tq, tk):
    """How the kernels read a boolean mask applied with a finite fill (`_hiding_mask`, whose
    Skip it raises): (structure, tensor, hides, rows_from). Split as `causal & keep`
    (`_split_hiding_mask`): the proven (causal, window, align), `keep` (True keeps) and the
    whole mask with its polarity, for the rows it hides whole; else (None, the mask, its
    polarity, None), the mask read whole (those rows read from it)."""
    tensor, hides = _hiding_mask(mask, drop_p, unflat)
    split = _split_hiding_mask(tensor, hides, values, tq, tk)
    if split is None:
        return None, tensor, hides, None
    structure, keep = split
    return structure, keep, False, (tensor, hides)


def _refused_as_tensor(mask: tuple[str, Any, Any], e: Skip) -> str:
    """Why a boolean mask that is not proven causal is not read as a tensor either."""
    if mask[0] not in ("masked_fill", "where_keep", "where_mask"):
        return ""
    return f"; as an attn_mask tensor it is refused: {e}"


def _check_causal(
    mask: tuple[str, Any, Any], scores: Any, values: Values
) -> tuple[bool, int | tuple[int, int] | None, str]:
    """(True, None, alignment) if the one mask on the scores is exactly causal (top-left, or
    bottom-right for a KV cache's mask), (True, w, "top_left") if it is a causal sliding window
    of w keys, (False, (left, right), "top_left") if it is a two-sided band
    (`masks.prove_structure`); Skip (with the reason) if none."""
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
    if how != "add" and (not isinstance(fill, (int, float)) or fill > NEAR_NEG_INF):
        raise Skip(
            f"masked value {fill!r} is not -inf (or finfo.min); only causal masks filled with "
            "-inf are supported"
        )
    if not isinstance(mask_node, fx.Node):
        raise Skip(unsupported)
    se = example_value(scores)
    me = example_value(mask_node)
    if how == "add" and not (isinstance(me, torch.Tensor) and me.is_floating_point()):
        raise Skip(unsupported)
    if how != "add" and not (isinstance(me, torch.Tensor) and me.dtype == torch.bool):
        raise Skip("the mask is not boolean")
    try:
        # Lengths that may differ: proven only as a KV cache's bottom-right mask (a slice
        # causal at one (Tq, Tk) pair may not be at another; `prove_causal_aligned`).
        return prove_structure(
            mask_node, values, se.shape[-2], se.shape[-1], keep=how == "where_keep"
        )
    except Skip as e:
        raise Skip(f"{unsupported} ({e})" if how == "add" else str(e)) from e


def match_sdpa(n: Any, values: Values) -> Match:
    """F.scaled_dot_product_attention: accepted with is_causal/scale/enable_gqa, a causal or
    tensor attn_mask, and a constant dropout_p (the kernels' dropout)."""
    q, k, v = (node_arg(n, i, name) for i, name in enumerate(("query", "key", "value")))
    mask = node_arg(n, 3, "attn_mask")
    dropout_p = node_arg(n, 4, "dropout_p", 0.0)
    is_causal = node_arg(n, 5, "is_causal", False)
    scale = node_arg(n, 6, "scale")
    enable_gqa = node_arg(n, 7, "enable_gqa", False)
    site = Site(kind="sdpa", location=location(n))
    if not isinstance(is_causal, bool):
        raise Skip("is_causal is not a Python constant")
    if not isinstance(enable_gqa, bool):
        raise Skip("enable_gqa is not a Python constant")
    # SDPA's dropout_p applies whatever the module's mode: the graph's constant is the rate.
    dropout_p = dropout_prob(dropout_p, True, "SDPA")
    window = None
    align = "top_left"
    tensor_mask = None
    rows_from = None  # (an additive mask split: the whole mask, for the rows it hides whole)
    alibi = None
    qe, ke = example_value(q), example_value(k)
    tq, tk = qe.shape[-2], ke.shape[-2]
    if mask is not None and is_causal:
        raise Skip("attn_mask together with is_causal=True is not supported")
    me = example_value(mask)
    if isinstance(me, torch.Tensor) and me.is_floating_point():
        try:  # ALiBi: the kernels compute the bias from the slopes
            alibi = prove_alibi(mask, example_value(k).shape[-2], 4)
            mask = None
        except Skip:
            pass
    if mask is not None:
        try:
            is_causal, window, align = prove_structure(
                mask, values, example_value(q).shape[-2], example_value(k).shape[-2], keep=True
            )
        except Skip:
            split = _causal_and_key_mask(
                mask, values, example_value(q).shape[-2], example_value(k).shape[-2]
            )
            added = None
            if split is None and (not enable_gqa or known_eq(qe.shape[-3], ke.shape[-3])):
                # a float mask `where(causal & keep, 0, finfo.min)`: as it, split (rows it
                # hides whole: eager's mean of v, which takes v's heads equal to q's)
                added = _additive_split(("add", mask, None), 0, dropout_p, None, values, tq, tk)
            if split is not None:  # HF's padded decoder batch: causal (or a band) + a key mask
                (is_causal, window, align), tensor_mask = split
            elif added is not None:
                (is_causal, window, align), tensor_mask, rows_from = added
            else:
                # Not a causal mask: the kernel reads the tensor itself (exact by
                # construction, at every shape the graph accepts).
                tensor_mask = _tensor_mask(mask)
    terms: list[Any] = [None] if scale is None else [(scale, 1)]
    m = Match(site, q, k, v, n, is_causal, terms, interior=[n], window=window, align=align)
    m.attn_mask = tensor_mask
    if rows_from is not None:
        m.empty_rows, m.rows_from = v, rows_from
    m.alibi = alibi
    m.dropout_p = dropout_p
    m.three_d = example_value(q).dim() == 3
    if not enable_gqa and not known_eq(example_value(q).shape[-3], example_value(k).shape[-3]):
        raise Skip("query and key head counts differ without enable_gqa=True")
    return m


_AND_FNS = {operator.and_, torch.logical_and, torch.bitwise_and, torch.Tensor.logical_and,
            torch.Tensor.bitwise_and, torch.Tensor.__and__}  # fmt: skip


def _causal_and_key_mask(mask: Any, values: Values, tq: Any, tk: Any):
    """((causal, window, alignment), key mask) when an SDPA boolean attn_mask is `causal & keep`,
    else None: `causal` proven causal, a causal band or a two-sided band for every length by
    `masks.prove_structure` (either alignment),
    `keep` a boolean tensor constant along the query rows ([B, 1, 1, Sk] or broadcastable: one
    entry per key). HF's mask for a padded decoder batch is built so (`masking_utils`: the causal
    comparison of query and key positions `&` the padding mask indexed per key, expanded to
    [B, 1, Sq, Sk]). The kernels then take the causal flag and read `keep` as a key-padding mask
    (one vector a tile) instead of the N x N tensor; exact for any `keep`, as `&` is. Only
    views that broadcast (expand) and same-dtype casts are looked through above the `&`."""
    me = example_value(mask)
    if not (isinstance(mask, fx.Node) and isinstance(me, torch.Tensor) and me.dtype == torch.bool):
        return None
    node = mask
    while isinstance(node, fx.Node):
        if node.op == "call_method" and node.target in ("expand", "expand_as", "to"):
            src = example_value(node.args[0])
            if not (isinstance(src, torch.Tensor) and src.dtype == torch.bool):
                return None
            if node.target == "to" and (
                len(node.args) > 2 or any(kw != "device" for kw in node.kwargs)
            ):
                return None
            node = node.args[0]
        else:
            break
    if not (isinstance(node, fx.Node) and is_fn(node, _AND_FNS, ("logical_and", "bitwise_and"))):
        return None
    if len(node.args) != 2 or node.kwargs:
        return None
    for causal, keep in (node.args, node.args[::-1]):
        ke = example_value(keep)
        if not (isinstance(keep, fx.Node) and isinstance(ke, torch.Tensor)):
            continue
        if ke.dtype != torch.bool or ke.dim() > 4 or ke.dim() < 2:
            continue
        if not known_eq(ke.shape[-2], 1):  # one entry per key, the same for every query row
            continue
        try:  # (a KV cache's bottom-right causal part too: the op slices `keep` with its keys)
            proven = prove_structure(causal, values, tq, tk, keep=True)
        except Skip:
            continue
        return proven, keep
    return None


def _tensor_mask(mask: Any) -> Any:
    """An SDPA attn_mask the kernels can read as a tensor (`flashgen.ops.attention(attn_mask=)`):
    a boolean or floating tensor of at most 4 dims (a floating one that requires grad, a learned
    bias, gets its gradient: `flashgen.kernels.bias_grad`); Skip otherwise."""
    me = example_value(mask)
    if not isinstance(mask, fx.Node) or not isinstance(me, torch.Tensor):
        raise Skip("attn_mask is not a tensor")
    if not (me.dtype == torch.bool or me.is_floating_point()):
        raise Skip(f"attn_mask of dtype {me.dtype} (boolean or floating are read by the kernels)")
    if me.dim() > 4:
        raise Skip(f"attn_mask with {me.dim()} dims")
    return mask
