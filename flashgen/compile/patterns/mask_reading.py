"""How the masks met on the way to a hand-written softmax, or given to SDPA, are read for
`matchers`: ALiBi taken out (the kernels compute it), a causal structure, window or band proven
for every length (`masks.prove_structure`), HF's padded batches split into such a structure and
a key mask, or the mask handed to the kernels as a tensor (exact whatever it holds). A reader
raises Skip with its reason where the kernels cannot take a mask as written; `read_masks` makes
that the site's problem.
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import torch
from torch import fx

from .alibi import prove_alibi
from .core import (
    CAST_METHODS,
    MASKED_FILL_FNS,
    MUL_FNS,
    NEAR_NEG_INF,
    SUB_FNS,
    Skip,
    example_value,
    guarded_number,
    is_fn,
    known_eq,
    scalar_number,
)
from .mask_values import Values
from .masks import prove_structure
from .softmax_walk import SoftmaxWalk


def take_alibi(w: SoftmaxWalk) -> tuple[Any, str]:
    """(ALiBi's (slopes, factor) or None, why baddbmm's bias is not ALiBi or ""): the first bias
    added after every scale factor that is ALiBi, beside one other mask or alone, taken out of
    `w.masks` (the kernels compute it)."""
    masks, add_terms, unflat = w.masks, w.add_terms, w.unflat
    if not (len(masks) == 2 or (len(masks) == 1 and masks[0][0] in ("add", "sub"))):
        return None, ""
    not_alibi = ""
    for i, (how, node, _) in enumerate(masks):
        if how in ("add", "sub") and add_terms.get(i) == 0:
            in_3d = unflat is not None and i >= w.masks_4d  # added to the 3-D scores
            try:
                alibi = _alibi(
                    how, node, w.scores, 4 if unflat is not None and not in_3d else None,
                    unflat[1] if unflat is not None and in_3d else None,
                )  # fmt: skip
            except Skip as e:
                if w.baddbmm is not None and node is w.baddbmm[0]:
                    not_alibi = f"; baddbmm's bias is not ALiBi ({e})"
                continue
            w.masks = masks[:i] + masks[i + 1 :]
            w.masks_4d -= i < w.masks_4d
            w.add_terms = {j - (j > i): t for j, t in add_terms.items() if j != i}
            return alibi, not_alibi
    return None, not_alibi


class Reading(NamedTuple):
    """How the kernels read a site's masks (`read_masks`); the defaults: no mask at all."""

    causal: bool = False
    window: int | tuple[int, int] | None = None
    align: str = "top_left"
    tensor_mask: Any = None  # the tensor the kernels read (attn_mask), or None
    # True / False where a boolean mask is read as a tensor (True marks a hidden key); None
    hides: bool | None = None
    rows_from: Any = None  # the whole mask where the kernels read only its per-key part
    key_bias: Any = None  # `_bias_beside_mask`'s or `_two_biases`' bias
    mask_row: bool = False  # the kernels read tensor_mask's first query row alone (`key_row`)
    # (fill, whether True hides a key) where a boolean tensor_mask is handed over as the
    # additive `where(hidden, fill, 0)` (`_dropout_fill`)
    fill: tuple[float, bool] | None = None


def read_masks(w: SoftmaxWalk, values: Values, not_alibi: str) -> Reading:
    """How the kernels read the masks left after ALiBi (`Reading`); problems into
    `w.problems` (then the Reading of no mask)."""
    masks, add_terms, unflat = w.masks, w.add_terms, w.unflat
    none = Reading()
    if w.softcap is not None and len(masks) > w.masks_at_cap:
        w.problems.append(
            "a mask or bias is applied to the scores inside the softcap's tanh; the kernels "
            "apply it after the softcap"
        )
        return none
    if len(masks) > 2:
        w.problems.append("more than two masks are applied to the scores" + not_alibi)
        return none
    if len(masks) == 2:
        try:  # a bias beside a boolean mask (BLOOM: its ALiBi from the padding, HF's mask)
            both = _bias_beside_mask(
                masks, add_terms, w.scores, values, w.drop_p, unflat, w.masks_4d
            )
        except Skip as e:
            try:  # two floating biases (T5's under checkpointing): read as their sum
                tensor_mask, key_bias = _two_biases(masks, add_terms, unflat)
            except Skip as e2:
                w.problems.append(
                    "more than one mask is applied to the scores; only one causal mask is, a "
                    f"bias beside one boolean mask ({e}), or two floating biases ({e2})" + not_alibi
                )
                return none
            return Reading(tensor_mask=tensor_mask, key_bias=key_bias)
        return both
    if masks:
        return _read_one_mask(w, values, not_alibi)
    return none


def _read_one_mask(w: SoftmaxWalk, values: Values, not_alibi: str) -> Reading:
    """`read_masks` of one mask: proven causal (with a window or bottom-right), else HF's
    eager padded batch (an additive causal-and-keep mask), else an additive bias read as it
    is (its first row alone where every row is the same: `key_row`), else a boolean mask
    filled with finfo.min read as a tensor."""
    mask = w.masks[0]
    terms_at = w.add_terms.get(0)
    try:
        if mask[0] == "sub":
            raise Skip("a subtracted mask is not proven causal; it is read as a negated bias")
        causal, window, align = _check_causal(mask, w.scores, values)
        return Reading(causal, window, align)
    except Skip as e:
        reason = e
    se = example_value(w.scores)
    tq, tk = se.shape[-2], se.shape[-1]
    # (a mask applied after flattened scores are viewed back as [B, H, Sq, Sk], HF DeBERTa's,
    # is a 4-D mask as any other; one applied to the [B * H, Sq, Sk] scores is refused)
    flat = w.unflat if w.masks_4d == 0 else None
    split = additive_split(mask, terms_at, w.drop_p, flat, values, tq, tk)
    if split is not None:  # HF's eager padded batch: + where(causal & keep, 0, min)
        (causal, window, align), tensor_mask, rows_from = split
        return Reading(causal, window, align, tensor_mask, False, rows_from)
    try:  # an additive bias (ALiBi, T5's): the kernel reads the tensor as it is
        added = _additive_bias(mask, terms_at)
        if flat is not None:  # (a mask tensor in BLOOM's layout: not supported)
            raise Skip("an additive mask beside [batch x heads]-flattened scores")
        return Reading(tensor_mask=added, mask_row=key_row(mask, terms_at, values, tq, tk))
    except Skip:
        pass
    try:  # a boolean mask filled with finfo.min (HF's padded batch)
        read = _read_hiding(mask, w.drop_p, flat, values, tq, tk)
    except Skip as e2:
        fill = _dropout_fill(mask, w.drop_p, flat, se.dtype)
        if fill is not None:
            return fill
        w.problems.append(str(reason) + not_alibi + _refused_as_tensor(mask, e2))
        return Reading()
    structure, tensor_mask, hides, rows_from = read
    causal, window, align = structure if structure is not None else (False, None, "top_left")
    return Reading(causal, window, align, tensor_mask, hides, rows_from)


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
    bias = mask_tensor(node)
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
    return mask_tensor(node), how != "where_keep"


def _dropout_fill(mask: tuple[str, Any, Any], drop_p: float, unflat: Any, dtype) -> Any:
    """With attention dropout, a boolean per-key mask applied with an absorbing fill
    (`ABSORBING_FILL`, finite in the scores' dtype: HF XLM's finfo.min) read whole as the
    additive `where(hidden, fill, 0)` (a Reading), else None. Eager's masked score is the fill;
    the kernels' is score + fill, the same number, so every row is eager's and the kernels'
    dropout drops entries of it as eager's drops entries of its own. A row such a mask hides
    entirely (a batch entry with no key to see) is uniform in both, but the kernels give it no
    gradient (the bias hides it: `templates/attn_fwd.py.jinja`, HIDDEN_MAX) where eager gives
    v a share of it when a loss reads that row; per key, only an entry that is all padding has
    such rows. A mask of more than one row (DeBERTa's outer product of the padding, hiding
    every padded query row) stays refused: there a loss reading the padding's outputs would
    get another gradient for v."""
    if not drop_p:
        return None
    try:
        tensor, hides = _hiding_mask(mask, 0.0, unflat)
    except Skip:
        return None
    fill, te = mask[2], example_value(tensor)
    if te.dim() < 2 or not known_eq(te.shape[-2], 1):
        return None
    if not (-math.inf < fill <= ABSORBING_FILL):
        return None
    if not math.isfinite(float(torch.tensor(fill, dtype=dtype))):
        return None
    return Reading(tensor_mask=tensor, fill=(float(fill), hides))


# A fill that absorbs any score added to it: fill + s == fill in float32 (and bfloat16) for
# every |s| below 2**99, so a row it hides entirely is uniform in eager whatever was added
# (finfo(float32).min and finfo(bfloat16).min are below it; finfo(float16).min is not).
ABSORBING_FILL = -(2.0**100)
_ZERO_FNS = {torch.zeros, torch.zeros_like, torch.Tensor.new_zeros}


def _is_zero(a: Any) -> bool:
    """Whether `a` is 0: a Python number, a tensor node made by zeros / zeros_like /
    new_zeros, or `torch.tensor(0.0)` / `torch.scalar_tensor(0)` (HF's mask builders add
    `where(keep, torch.zeros(()), finfo.min)`, transformers 5.17 `torch.tensor(0.0)`)."""
    a = scalar_number(a)
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return a == 0
    return isinstance(a, fx.Node) and is_fn(a, _ZERO_FNS, ("new_zeros", "zero_"))


def _as_hiding(mask: tuple[str, Any, Any], terms_at: int | None, any_fill: bool = False):
    """The boolean mask that an additive mask of 0 and a fill applies, as the walk records
    `torch.where` / `masked_fill` masks (("where_keep" | "where_mask" | "masked_fill", mask,
    fill)), when added after every scale factor (`terms_at` 0) with an ABSORBING_FILL: then
    scores + it equals `where(keep, scores, fill)` exactly (a hidden key's score is the fill,
    a kept one's s + 0). Its spellings: `where(keep, 0, fill)` (HF's masking_utils; or
    `where(hide, fill, 0)`), `zeros.masked_fill(hide, fill)`, and `(1 - keep.to(dtype)) * fill`
    with `keep` boolean (so 0 or 1: HF's older extended masks, from a boolean mask). None for
    anything else. `any_fill`: any Python number as the fill (`key_row`, which keeps the
    tensor's values and only asks which entries get the fill)."""
    how, node, _ = mask
    if how != "add" or terms_at != 0 or not isinstance(node, fx.Node):
        return None
    ne = example_value(node)
    if not (isinstance(ne, torch.Tensor) and ne.is_floating_point()):
        return None

    def absorbing(fill: Any) -> bool:
        if any_fill:
            return isinstance(fill, (int, float)) and not isinstance(fill, bool)
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


def additive_split(mask, terms_at, drop_p, unflat, values, tq, tk):
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


def key_row(mask, terms_at, values, tq, tk) -> bool:
    """Whether an additive mask that the kernels read as a tensor is `where(keep, 0, fill)`
    (`_as_hiding`'s spellings) with `keep` one entry per key and nothing else proven in it (no
    causal part, window or band: `causal_and_key_mask` split it as a mask that keeps every key
    `&` keep), so that every query row of it holds the same values: then the kernels read its
    first row alone (`Match.mask_row`), a per-key additive mask with the tensor's own values,
    instead of the [B, 1, Sq, Sk] tensor, one tile of it a block.

    Where it matters: `additive_split` reads such a mask as the boolean `keep` plus eager's
    uniform softmax on the rows it hides whole, which attention dropout refuses (eager drops
    entries of that uniform row; the rewrite's mean of v would not), so HF BERT's eager
    attention in training read its padding as a dense [B, 1, N, N] mask. The row is exact
    whatever the rows hold, dropout included: it is the same values, added to the same
    scores, whatever the fill (float16's finfo.min, which `additive_split` does not take, too)."""
    hider = _as_hiding(mask, terms_at, any_fill=True)
    if hider is None:
        return False
    how, cond, _ = hider
    split = _split_hiding_mask(cond, how != "where_keep", values, tq, tk)
    return split is not None and split[0] == (False, None, "top_left")


def _bias_beside_mask(masks, add_terms, scores, values, drop_p, unflat, masks_4d):
    """A floating bias added after the scale beside one boolean mask (HF BLOOM with an
    attention_mask: ALiBi whose positions count only the kept keys, which `prove_alibi` does
    not prove, beside HF's additive causal & padding mask). Returns a Reading: the boolean
    mask proven causal / a band (tensor_mask None), split into that and a per-key `keep`, or
    else read whole (`_hiding_mask`; with dropout `_dropout_fill`'s additive mask); key_bias
    is (bias node, H) with H the head count to unflatten it by when it was added to BLOOM's
    [B * H, Sq, Sk] scores, else None. The rewrite merges the two into the kernels' additive
    mask `where(keep, bias, -inf)` (with dropout `where(hidden, fill, 0) + bias`). A row the
    mask hides whole is uniform in eager only if the fill absorbs the bias added to it, so an
    additive mask, or one the bias is added after, needs an ABSORBING_FILL (and a bias below 2**99 there: one that itself holds finfo.min
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
        return Reading(*_check_causal(hider, scores, values), key_bias=(bias, heads))
    except Skip:
        pass
    try:
        structure, tensor, hides, rows_from = _read_hiding(
            hider, drop_p, None, values, *example_value(scores).shape[-2:]
        )
    except Skip:  # with dropout: the mask as the additive where(hidden, fill, 0), + the bias
        read = _dropout_fill(hider, drop_p, None, example_value(scores).dtype)
        if read is None:
            raise
        return read._replace(key_bias=(bias, heads))
    causal, window, align = structure or (False, None, "top_left")
    return Reading(causal, window, align, tensor, hides, rows_from, (bias, heads))


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
    """`causal_and_key_mask`'s split of a boolean mask that hand-written attention applies
    with a finite fill (`_hiding_mask`): `causal & keep` under `torch.where`, `~(causal &
    keep)` under `masked_fill` (`hides`), None for anything else (then the whole tensor is
    read). tq, tk: the scores' lengths."""
    if hides:
        if not (
            isinstance(mask, fx.Node) and is_fn(mask, _NOT_FNS, ("logical_not", "bitwise_not"))
        ):
            return None
        mask = mask.args[0]
    return causal_and_key_mask(mask, values, tq, tk)


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


_AND_FNS = {operator.and_, torch.logical_and, torch.bitwise_and, torch.Tensor.logical_and,
            torch.Tensor.bitwise_and, torch.Tensor.__and__}  # fmt: skip


def causal_and_key_mask(mask: Any, values: Values, tq: Any, tk: Any):
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


def mask_tensor(mask: Any) -> Any:
    """An SDPA attn_mask the kernels can read as a tensor (`flashgen.ops.attention(attn_mask=)`):
    a boolean or floating tensor of at most 4 dims (a floating one that requires grad, a learned
    bias, gets its gradient: `flashgen.kernels.bias_grad`); Skip otherwise."""
    me = example_value(mask)
    if not isinstance(mask, fx.Node) or not isinstance(me, torch.Tensor):
        raise Skip("attn_mask is not a tensor")
    if me.dtype == torch.bool and is_fn(mask, set(), ("expand_as",)):
        # `keep.expand_as(scores)` (HF XLM): the op broadcasts the mask itself, and the
        # scores are then not computed for their shape
        src = mask.args[0]
        if isinstance(src, fx.Node) and example_value(src).dim() <= 4:
            mask, me = src, example_value(src)
    if not (me.dtype == torch.bool or me.is_floating_point()):
        raise Skip(f"attn_mask of dtype {me.dtype} (boolean or floating are read by the kernels)")
    if me.dim() > 4:
        raise Skip(f"attn_mask with {me.dim()} dims")
    return mask
