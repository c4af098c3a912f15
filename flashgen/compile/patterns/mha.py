"""nn.MultiheadAttention: Dynamo keeps `F.multi_head_attention_forward` as one node, so it is
recognised as such and rebuilt as projections -> flashgen op -> output projection."""

from __future__ import annotations

import inspect
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from .core import (
    Match,
    Site,
    Skip,
    dropout_prob,
    erase_dead,
    example_value,
    fake_mode,
    known_eq,
    location,
    set_example_values,
    size_hint,
)
from .mask_values import Values
from .masks import prove_causal


def match_mha(n: Any, values: Values) -> Match:
    """`F.multi_head_attention_forward` (what nn.MultiheadAttention calls; Dynamo keeps it as one
    node): rebuilt as projections -> flashgen op -> output projection when no weights are
    returned and no bias_k/v or zero-attn. Masks: an attn_mask proven causal is the causal
    flag; with `is_causal=True` and no key_padding_mask, PyTorch itself drops attn_mask for the
    flag, and so does this; any other attn_mask (boolean, True hiding a key, or additive; 2-D
    [L, S] or 3-D [B * heads, L, S]) is handed to the kernels as a mask tensor, merged with a
    key_padding_mask as PyTorch merges them (`_mha_mask`). Rows that see no key are zeros in
    both: PyTorch's attention gives them zeros too. With need_weights=True (the default) whose
    weights are not used, PyTorch computes the same attention by its explicit softmax, which
    gives such rows NaN: then only no mask or a causal one (no row hidden whole) is taken."""

    try:
        a = inspect.signature(F.multi_head_attention_forward).bind(*n.args, **n.kwargs)
    except TypeError as e:
        raise Skip(f"unexpected multi_head_attention_forward call: {e}") from e
    a.apply_defaults()
    p = a.arguments
    if not isinstance(p["need_weights"], bool):
        raise Skip("need_weights is not a Python constant")
    weights = p["need_weights"]  # (the weights themselves must be unused: below)
    for name in ("bias_k", "bias_v", "static_k", "static_v"):
        if p[name] is not None:
            raise Skip(f"nn.MultiheadAttention with {name} is not supported")
    if p["add_zero_attn"] is not False:
        raise Skip("nn.MultiheadAttention with add_zero_attn=True is not supported")
    drop_p = dropout_prob(p["dropout_p"], p["training"], "nn.MultiheadAttention")
    if not isinstance(p["num_heads"], int) or not isinstance(p["is_causal"], bool):
        raise Skip("num_heads / is_causal are not Python constants")
    q, k, v = p["query"], p["key"], p["value"]
    causal = False
    kpm = p["key_padding_mask"]
    tensor_mask = None  # an attn_mask read by the kernels as it is (`_mha_mask`)
    if p["attn_mask"] is not None and p["is_causal"] and kpm is None and not weights:
        causal = True  # (PyTorch's own reading of the hint: attn_mask is not used)
    elif p["attn_mask"] is not None:
        try:
            prove_causal(
                p["attn_mask"],
                values,
                example_value(q).shape[0],
                example_value(k).shape[0],
                keep=False,
            )
            causal = True
        except Skip as e:
            if weights:
                raise Skip(_weights_reason("an attn_mask not proven causal", e)) from e
            tensor_mask = _check_attn_mask(p["attn_mask"], example_value(q), p["num_heads"])
    elif p["is_causal"]:
        raise Skip("is_causal=True without attn_mask")
    if kpm is not None and weights:
        raise Skip(_weights_reason("a key_padding_mask"))
    if kpm is not None:
        # [B, S]: True (or -inf) hides a key; the kernels read it as a [B, 1, 1, S] mask tensor
        km = example_value(kpm)
        if not isinstance(km, torch.Tensor) or km.dim() != 2:
            raise Skip("key_padding_mask is not a 2-D [batch, seq] tensor")
        if not (km.dtype == torch.bool or km.is_floating_point()) or km.requires_grad:
            raise Skip("key_padding_mask must be boolean, or floating without grad")
    users = list(n.users)
    if not all(u.op == "call_function" and u.target is operator.getitem for u in users):
        raise Skip("the (output, weights) result of nn.MultiheadAttention is used whole")
    outs = [u for u in users if u.args[1] == 0]
    if len(outs) != 1 or any(u.users for u in users if u.args[1] != 0):
        raise Skip("the attention weights of nn.MultiheadAttention are used")
    site = Site(kind="mha", location=location(n))
    masks = [x for x in (tensor_mask, kpm) if x is not None]
    if masks:  # the op reads them as one mask tensor (rewrite_mha)
        boolean = all(example_value(x).dtype == torch.bool for x in masks)
        site.mask = "bool" if boolean else "add"
        site.key_mask = tensor_mask is None  # key_padding_mask alone: [B, 1, 1, S]
    m = Match(site, q, k, v, outs[0], causal, [None], interior=[n])
    # (the arguments as given, and the attn_mask the kernels read whole: `_mha_mask`)
    m.mha = {**p, "tensor_mask": tensor_mask}
    m.dropout_p = site.dropout = drop_p
    return m


def _weights_reason(what: str, why: Any = None) -> str:
    """Why a need_weights=True site with `what` is left alone (`match_mha`)."""
    tail = f" ({why})" if why is not None else ""
    return (
        f"nn.MultiheadAttention with need_weights=True (the default) and {what}: PyTorch's "
        "explicit softmax for it gives a row that sees no key NaN, the kernels zeros; call it "
        f"with need_weights=False{tail}"
    )


def _check_attn_mask(node: Any, q: torch.Tensor, heads: int) -> Any:
    """An attn_mask the kernels can read as a tensor: boolean or floating without grad, 2-D
    [L, S] or 3-D [B * heads, L, S] (q is [L, B, E]); Skip otherwise."""
    am = example_value(node)
    if not isinstance(am, torch.Tensor) or am.dim() not in (2, 3):
        raise Skip("nn.MultiheadAttention attn_mask is not a 2-D or 3-D tensor")
    if not (am.dtype == torch.bool or am.is_floating_point()) or am.requires_grad:
        raise Skip("nn.MultiheadAttention attn_mask must be boolean, or floating without grad")
    if am.dim() == 3 and not known_eq(am.shape[0], q.shape[1] * heads):
        raise Skip(
            f"nn.MultiheadAttention attn_mask of shape {tuple(am.shape)}: not [B * heads, L, S]"
        )
    return node


def _mha_mask(call: Any, p: dict[str, Any], heads: int, dtype: torch.dtype) -> Any:
    """The op's attn_mask for MHA's attn_mask and key_padding_mask (either may be None, not
    both): [1 or B, 1 or heads, L, S]. Both boolean: True where neither hides the key (MHA's
    True hides, the op's shows). Otherwise additive, as `F.multi_head_attention_forward`
    merges them: a boolean one as 0 / -inf in q's dtype, a floating one as it is, added."""
    am, kpm = p["tensor_mask"], p["key_padding_mask"]
    parts = []
    if am is not None:
        if example_value(am).dim() == 2:
            am4 = call(operator.getitem, am, (None, None))
        else:  # [B * heads, L, S], batch-major as MHA lays it out
            am4 = call("unflatten", am, 0, (-1, heads))
        parts.append((am4, example_value(am).dtype == torch.bool))
    if kpm is not None:
        kpm4 = call(operator.getitem, kpm, (slice(None), None, None, slice(None)))
        parts.append((kpm4, example_value(kpm).dtype == torch.bool))
    if all(boolean for _, boolean in parts):
        keep = [call(torch.logical_not, x) for x, _ in parts]
        return keep[0] if len(keep) == 1 else call(torch.logical_and, *keep)
    added = []
    for x, boolean in parts:
        if boolean:  # MHA's True hides: -inf there, 0 elsewhere, in q's dtype
            x = call("to", call(torch.where, x, float("-inf"), 0.0), dtype)
        added.append(x)
    return added[0] if len(added) == 1 else call(operator.add, *added)


def _mha_projection(p: dict[str, Any], which: int) -> tuple[Any, Any]:
    """(weight, bias) source for projection `which` (0 q, 1 k, 2 v) as nodes or slices."""
    bias = p["in_proj_bias"]
    if p["use_separate_proj_weight"]:
        w = p[("q_proj_weight", "k_proj_weight", "v_proj_weight")[which]]
        return w, (None if bias is None else ("slice", bias, which))
    return ("slice", p["in_proj_weight"], which), (None if bias is None else ("slice", bias, which))


def _in_features(p: dict[str, Any], which: int, e: int) -> Any:
    """The input width projection `which` (1 k, 2 v) takes: kdim / vdim where the module has
    its own k / v projection weights (`use_separate_proj_weight`), else embed_dim."""
    if not p["use_separate_proj_weight"]:
        return e
    return example_value(p[("q_proj_weight", "k_proj_weight", "v_proj_weight")[which]]).shape[-1]


def check_mha(m: Match) -> None:
    """Kernel eligibility for a MultiheadAttention site, on the projected (fake) shapes."""
    p = m.mha
    assert p is not None
    q, k, v = (example_value(x) for x in (m.q, m.k, m.v))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
        raise Skip("only batched (3-D) nn.MultiheadAttention inputs are supported")
    wq = example_value(p["q_proj_weight"] if p["use_separate_proj_weight"] else p["in_proj_weight"])
    e = wq.shape[-1]
    heads = p["num_heads"]
    if not isinstance(e, int) or e % heads:
        raise Skip("embedding dim is not a static multiple of num_heads")
    if q.shape[-1] != e or not all(
        known_eq(t.shape[-1], _in_features(p, which, e)) for which, t in ((1, k), (2, v))
    ):
        raise Skip("nn.MultiheadAttention inputs of other widths than its projections take")
    d = e // heads
    # (the projections' outputs: kdim / vdim inputs are projected to embed_dim like the query)
    shaped = [
        t.new_empty((*t.shape[:-1], e)).unflatten(-1, (heads, d)).permute(1, 2, 0, 3).contiguous()
        for t in (q, k, v)
    ]
    from ...kernels.validate import check_inputs, check_kernel_device

    try:
        scale = check_inputs(*shaped, causal=m.causal, scale=None)
        check_kernel_device(q.device)
    except (ValueError, RuntimeError) as err:
        raise Skip(f"the flashgen kernels do not take this site: {err}") from err
    m.scale = scale
    m.site.scale, m.site.causal = scale, m.causal
    shape = "x".join(str(x) for x in shaped[0].shape)
    m.site.shape = f"q[{shape}] {str(q.dtype).replace('torch.', '')}"
    # what the run-time choice needs (explain's "runs", `choice.keep_reason`), as check_match
    m.site.dtype = str(q.dtype).replace("torch.", "")
    m.site.head_dim = d
    m.site.seq_q, m.site.seq_k = size_hint(shaped[0].shape[2]), size_hint(shaped[1].shape[2])
    m.site.rows = size_hint(shaped[0].shape[0]) * heads
    m.site.device = q.device.type


def rewrite_mha(gm: fx.GraphModule, m: Match, op: Any) -> None:
    """query/key/value [T, B, E] -> linear -> [B, H, T, D] -> op -> [T, B, E] -> out_proj."""
    p = m.mha
    assert p is not None
    g = gm.graph
    heads = p["num_heads"]
    e = example_value(
        p["q_proj_weight"] if p["use_separate_proj_weight"] else p["in_proj_weight"]
    ).shape[-1]
    d = e // heads
    fm = fake_mode(example_value(m.out))
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
        # window, softcap, causal_align, deterministic, seq_bounds, attn_mask, dropout_p
        drop = (m.dropout_p,) if m.dropout_p else ()
        if p["key_padding_mask"] is None and p["tensor_mask"] is None:
            tail = (None, None, "top_left", None, None, None, *drop) if drop else ()
            o = call(op, *heads_in, m.causal, m.scale, *tail)
        else:
            mask = _mha_mask(call, p, heads, example_value(m.q).dtype)
            o = call(
                op, *heads_in, m.causal, m.scale, None, None, "top_left", None, None, mask, *drop
            )
        o = call("flatten", call("permute", o, 2, 0, 1, 3), -2)
        out = call(F.linear, o, p["out_proj_weight"], p["out_proj_bias"])
    set_example_values(fm, added)
    stack = m.out.meta.get("stack_trace")
    for node in added:
        node.meta["stack_trace"] = stack
    m.out.replace_all_uses_with(out)
    erase_dead(g, [m.out, *m.interior])
