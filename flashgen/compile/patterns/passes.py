"""The pass itself: kernel eligibility of a match, the rewrite, and `attention_pass`, which
finds every site in a graph, rewrites the eligible ones and reports the rest."""

from __future__ import annotations

import contextlib
import math
import operator
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx

from . import checkpoint, encoder_layer, window_views
from .choice import fused_layer_keep_reason, keep_reason
from .core import (
    SDPA_FNS,
    SUPPORTED_DTYPES,
    Match,
    Site,
    Skip,
    const_value,
    counters,
    equal_heads,
    erase_dead,
    example_value,
    fake_mode,
    head_dim_symbols,
    is_fn,
    is_tensor_node,
    known_eq,
    location,
    repeat_base,
    set_example_values,
    size_hint,
    split_baddbmm,
    split_scores_product,
)
from .mask_values import Values
from .matchers import is_softmax, match_sdpa, match_softmax, softmax_dim_ok
from .mha import check_mha, match_mha, rewrite_mha


def check_match(m: Match) -> None:
    """Kernel eligibility on the example (fake) values; fills scale, shape and GQA group. The
    checks that add guards on symbolic sizes come last, once nothing else can refuse."""
    q, k, v = _checked_operands(m)
    k, group = _kernel_operands(m, q, k, v)
    hd = int(q.shape[-1])
    m.scale = _scale(m, q, k, hd)
    factor_heads = _check_head_scales(m)
    hd = max(hd, int(v.shape[-1]))  # (the width the kernels run: `runtime.value_dim`)
    _check_extras(m, q, k)
    for heads in factor_heads:  # (guards: last)
        if not equal_heads(heads, q.shape[1]):
            raise Skip(f"a per-head factor of the scores for {heads} heads, q's {q.shape[1]}")
    m.site.head_scale = bool(m.head_scales)
    m.site.gqa_group = group
    shape = "x".join(str(s) for s in q.shape)
    m.site.shape = f"q[{shape}] {str(q.dtype).replace('torch.', '')}"
    if m.autocast is not None:
        m.site.shape += " (cast by autocast)"
    if not known_eq(v.shape[-1], q.shape[-1]):
        m.site.shape += f", values of head dim {v.shape[-1]}"
    m.site.dtype = str(q.dtype).replace("torch.", "")
    m.site.head_dim = hd
    m.site.seq_q, m.site.seq_k = size_hint(q.shape[-2]), size_hint(k.shape[-2])
    m.site.rows = math.prod(size_hint(n) or 0 for n in q.shape[:-2])
    m.site.device = q.device.type


def _checked_operands(m: Match) -> tuple[Any, Any, Any]:
    """q, k, v's example values, after checking that they and the output are tensors of one
    supported dtype and device whose shapes the kernels take."""
    q, k, v, o = example_value(m.q), example_value(m.k), example_value(m.v), example_value(m.out)
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v, o)):
        raise Skip("an operand is not a tensor")
    if m.flat_out:  # BLOOM: o is [B * H, Sq, D], the op's [B, H, Sq, D] flattened
        if not (q.dim() == 4 and o.dim() == 3 and known_eq(o.shape[0], q.shape[0] * q.shape[1])):
            raise Skip("the flattened output is not [batch x heads, seq, head_dim]")
        with fake_mode(o) or contextlib.nullcontext():
            o = o.unflatten(0, (q.shape[0], q.shape[1]))
    if not (q.dim() == k.dim() == v.dim() == o.dim() and q.dim() in (3, 4)):
        raise Skip(f"q/k/v must all be 4-D [batch, heads, seq, dim] (or 3-D); got {q.dim()}-D q")
    if m.autocast is not None:  # the operands as the products see them (the rewrite casts)
        q, k, v = (_autocast_value(t, m.autocast) for t in (q, k, v))
    dtypes = {q.dtype, k.dtype, v.dtype, o.dtype}
    if len(dtypes) != 1:
        names = "/".join(str(t.dtype).replace("torch.", "") for t in (q, k, v, o))
        raise Skip(f"q, k, v and the output must share one dtype; got {names}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise Skip(f"dtype {q.dtype} is not supported (float16, bfloat16, float32 are)")
    if len({q.device.type, k.device.type, v.device.type}) != 1:
        raise Skip("q, k, v are on different devices")
    d = q.shape[-1]
    if not known_eq(k.shape[-1], d):
        raise Skip("q and k must have the same head dim")
    if not known_eq(v.shape[-1], d) and m.site.kind in ("sdpa", "mha"):
        # (the op pads them: `flashgen.runtime.value_dim`; not measured against SDPA, whose
        # kernels take them as they are)
        raise Skip("values of another head dim than the keys' (latent attention): left to "
                   "PyTorch's SDPA, which takes them as they are")  # fmt: skip
    # A KV cache's keys and values are two graph inputs whose lengths Dynamo gives two symbols
    # (HF's dynamic cache: torch.cat of each past with the new step), so equality is rarely
    # provable. It need not be: attention with different K and V lengths fails in the original
    # program too (SDPA and P @ V both reject it), and the op checks it at run time.
    if size_hint(k.shape[-2]) != size_hint(v.shape[-2]):
        raise Skip("k and v have different sequence lengths")
    lead = q.dim() - 3
    for i in range(lead):
        if not (known_eq(q.shape[i], k.shape[i]) and known_eq(q.shape[i], v.shape[i])):
            raise Skip("q, k, v batch sizes differ (broadcast batch is not supported)")
    hk, hv = k.shape[-3], v.shape[-3]
    if not known_eq(hk, hv):
        raise Skip("k and v have different head counts")
    if not (known_eq(o.shape[-1], v.shape[-1]) and known_eq(o.shape[-2], q.shape[-2])):
        raise Skip("the output shape is not [..., seq_q, the values' head dim]")
    return q, k, v


def _autocast_value(t: Any, dtype: torch.dtype) -> Any:
    """Example value `t` as autocast hands it to the products: cast to `dtype`."""
    if t.dtype == dtype:
        return t
    with fake_mode(t) or contextlib.nullcontext():
        return t.to(dtype)


def _kernel_operands(m: Match, q: Any, k: Any, v: Any) -> tuple[Any, int]:
    """(k as the kernels get it, the GQA group): a K/V repeated for GQA is replaced by the
    un-repeated tensors (`m.k`, `m.v`), and the operands as the op receives them (4-D, last
    dim contiguous: `m.contiguous` says which the rewrite copies) pass the op's own input
    checks on the example values."""
    # GQA spelled as a copy of K/V: hand the kernel the un-repeated tensors instead.
    kb, nk = repeat_base(m.k)
    vb, nv = repeat_base(m.v)
    if nk == nv and nk > 1:
        m.k, m.v = kb, vb
        k, v = example_value(kb), example_value(vb)
        if m.autocast is not None:
            k, v = _autocast_value(k, m.autocast), _autocast_value(v, m.autocast)
    operands = [q, k, v]
    if m.three_d:
        operands = [t.unsqueeze(0) for t in operands]
    m.contiguous = [t.stride(-1) != 1 for t in operands]
    operands = [t.contiguous() if c else t for t, c in zip(operands, m.contiguous, strict=True)]
    group = max(size_hint(operands[0].shape[1]) // max(size_hint(operands[1].shape[1]), 1), 1)
    from ...kernels.validate import check_inputs, check_kernel_device

    if not known_eq(operands[2].shape[-1], operands[0].shape[-1]):
        # values of another head dim: the op pads the narrower side (`runtime.value_dim`), so
        # its checks are those of the padded call's (the larger dim, k's layout for v's)
        wide = max(size_hint(operands[0].shape[-1]), size_hint(operands[2].shape[-1]))
        with fake_mode(operands[0]) or contextlib.nullcontext():
            operands = [t.new_empty((*t.shape[:-1], wide)) for t in (*operands[:2], operands[1])]
    try:
        check_inputs(*operands, causal=m.causal, scale=None)
        check_kernel_device(q.device)
    except (ValueError, RuntimeError) as e:
        raise Skip(f"the flashgen kernels do not take this site: {e}") from e
    return k, group


def _scale(m: Match, q: Any, k: Any, hd: int) -> float:
    """The softmax scale the matched factors make (None: SDPA's default 1 / sqrt(head dim)),
    a positive finite number; head-dim symbols become their values (guards)."""
    syms = head_dim_symbols(q, k)
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
    if not (scale > 0 and math.isfinite(scale)):
        raise Skip(f"scale {scale} is not a positive finite number")
    return scale


def _check_head_scales(m: Match) -> list[Any]:
    """The per-head factors (`core.head_factor`) go into the op's q [B, Hq, Sq, D]: q must be
    4-D and each factor of q's dtype (their product keeps it). Returns the factors' head counts
    not proven q's, which `check_match` guards equal once nothing else can refuse the site."""
    q = example_value(m.q)
    heads = []
    for t, _ in m.head_scales:
        tv = example_value(t)
        if m.three_d or q.dim() != 4:
            raise Skip("a per-head factor of the scores with q not [batch, heads, seq, dim]")
        if tv.dtype != q.dtype:
            raise Skip(f"a per-head factor of the scores of dtype {tv.dtype}, q's {q.dtype}")
        if tv.dim() >= 3 and not (known_eq(tv.shape[-3], 1) or known_eq(tv.shape[-3], q.shape[1])):
            heads.append(tv.shape[-3])
    return heads


def _check_extras(m: Match, q: Any, k: Any) -> None:
    """The site's scale, masking, softcap, dropout and ALiBi into `m.site`, after checking
    that the kernels take them: a softcap the op accepts, mask tensors that broadcast to
    [B, Hq, Sq, Sk] (their head dim proven last: it may add a guard), no dropout beside a
    bottom-right causal mask, ALiBi slopes one per query head."""
    m.site.scale = m.scale
    m.site.causal = m.causal
    m.site.window = m.window
    m.site.align = m.align
    m.site.dropout = m.dropout_p
    if m.softcap is not None:
        from ...kernels.validate import check_softcap

        try:
            check_softcap(m.softcap)
        except ValueError as e:
            raise Skip(f"the flashgen kernels do not take this softcap: {e}") from e
        m.site.softcap = m.softcap
    full = (*q.shape[:3], k.shape[2])
    open_heads = []  # mask shapes whose head dim is neither 1 nor provably H (guarded below)
    for shape, what in _mask_shapes(m, q):
        if m.three_d:
            raise Skip("attn_mask with 3-D q/k/v")
        broadcasts = [known_eq(a, 1) or known_eq(a, b) for a, b in zip(shape, full, strict=True)]
        if not all(broadcasts[i] for i in (0, 2, 3)):
            raise Skip(f"{what} of shape {shape} does not broadcast to {full}")
        if not broadcasts[1]:  # (guarded below, once nothing else can refuse)
            open_heads.append((shape, what))
    if m.attn_mask is not None or m.key_bias is not None:
        bool_mask = m.key_bias is None and example_value(m.attn_mask).dtype == torch.bool
        bool_mask = bool_mask and m.mask_fill is None  # (else handed over as additive)
        m.site.mask = "bool" if bool_mask else "add"
        # one entry per key when every tensor the op's mask is made of has one (a bias beside
        # the mask reaches it combined with it: BLOOM's [B * H, 1, N] bias not proven ALiBi)
        # (with mask_row the op gets attn_mask's first query row: one entry per key)
        parts = (None if m.mask_row else m.attn_mask, m.key_bias and m.key_bias[0])
        shapes = [getattr(example_value(t), "shape", ()) for t in parts if t is not None]
        m.site.key_mask = all(len(s) >= 2 and known_eq(s[-2], 1) for s in shapes)
    if m.alibi is not None:
        _check_slopes(m, q)
    if m.sinks is not None:
        if m.three_d or m.flat_out:
            raise Skip("attention sinks with 3-D or [batch x heads]-flattened q/k/v")
        if m.dropout_p:
            raise Skip("attention dropout beside attention sinks is not supported")
        m.site.sinks = True
    for shape, what in open_heads:
        if not equal_heads(shape[1], full[1]):
            raise Skip(f"{what} of shape {shape} does not broadcast to {full}")


def _mask_shapes(m: Match, q: Any) -> list[tuple[tuple[Any, ...], str]]:
    """The 4-D shapes of the mask tensors the op's attn_mask is made of: attn_mask, and a
    bias beside it (`Match.key_bias`), the latter as the rewrite unflattens it from BLOOM's
    [B * H, ...] (which must then be B x H, not 1)."""
    shapes = []
    if m.attn_mask is not None:
        shapes.append((tuple(example_value(m.attn_mask).shape), "attn_mask"))
    if m.key_bias is not None:
        bias, heads = m.key_bias
        shape = tuple(example_value(bias).shape)
        if heads is not None:
            if len(shape) != 3 or not known_eq(shape[0], q.shape[0] * heads):
                raise Skip(f"the bias of shape {shape} beside the [batch x heads] scores")
            shape = (q.shape[0], heads, *shape[1:])
        shapes.append((shape, "the bias"))
    return [((1,) * (4 - len(s)) + s, what) for s, what in shapes]


def _check_slopes(m: Match, q: Any) -> None:
    """The proven ALiBi slopes must give one slope per query head (and maybe batch entry):
    shape [..., Hq, 1, 1] with a leading batch dim of 1 or B (`rewrite` flattens them to the
    op's [Hq] or [B, Hq])."""
    if m.three_d:
        raise Skip("ALiBi with 3-D q/k/v")
    s = example_value(m.alibi[0])
    shape = (1,) * (4 - s.dim()) + tuple(s.shape)
    if not (known_eq(shape[0], 1) or known_eq(shape[0], q.shape[0])) or not equal_heads(
        shape[1], q.shape[1]
    ):
        raise Skip(f"ALiBi slopes of shape {tuple(s.shape)}: one per query head is supported")
    m.site.alibi = True


def _slopes_arg(g: fx.Graph, m: Match, added: list) -> fx.Node:
    """Nodes making the op's alibi_slopes from the proven slopes node: times the proven
    factor, float32, flattened to [Hq] or [B, Hq] (see `_check_slopes`)."""
    node, factor = m.alibi
    s = example_value(node)
    if factor != 1.0:
        node = g.call_function(operator.mul, (node, factor))
        added.append(node)
    node = g.call_method("to", (node, torch.float32))
    added.append(node)
    batched = s.dim() == 4 and not known_eq(s.shape[0], 1)
    node = g.call_method("flatten", (node, 1) if batched else (node,))
    added.append(node)
    return node


def rewrite(gm: fx.GraphModule, m: Match, op: Any) -> None:
    """Insert op(q, k, v, causal, scale) before m.out (with [w - 1, 0], the op's window argument,
    for a proven causal sliding window, [left, right] for a two-sided band; the softcap's cap;
    with causal_align "bottom_right" for a KV cache's mask, its window too; the mask tensor),
    reroute its users, drop dead interior."""
    g = gm.graph
    fm = fake_mode(example_value(m.out))
    added: list[fx.Node] = []
    with g.inserting_before(m.out):
        args = [m.q, m.k, m.v]
        for t, power in m.head_scales:  # per-head factors of the scores, q's (of its dtype)
            args[0] = g.call_function(operator.mul if power > 0 else operator.truediv, (args[0], t))
            added.append(args[0])
        if m.autocast is not None:  # as autocast casts the products' operands
            for i, a in enumerate(args):
                if example_value((m.q, m.k, m.v)[i]).dtype != m.autocast:
                    args[i] = g.call_method("to", (a, m.autocast))
                    added.append(args[i])
        if m.three_d:
            args = [g.call_method("unsqueeze", (a, 0)) for a in args]
            added += args
        for i, needs in enumerate(m.contiguous):
            if needs:
                args[i] = g.call_method("contiguous", (args[i],))
                added.append(args[i])
        # The op's positional tail: window, softcap, causal_align, deterministic, seq_bounds,
        # attn_mask.
        mask = None
        if m.attn_mask is not None:
            mask = m.attn_mask
            if m.mask_row:  # every query row the same: the first alone (a per-key mask)
                lead = [slice(None)] * (example_value(mask).dim() - 2)
                first = (*lead, slice(None, 1), slice(None))
                mask = g.call_function(operator.getitem, (mask, first))
                added.append(mask)
            if m.mask_negated:  # `scores - bias`: the kernels add their mask
                mask = g.call_function(operator.neg, (mask,))
                added.append(mask)
            if m.mask_hides:  # masked_fill's mask (True: hidden); the kernels' True: visible
                mask = g.call_function(torch.logical_not, (mask,))
                added.append(mask)
            if m.mask_fill is not None:  # additive: the fill where hidden, 0 where kept
                fill, hides = m.mask_fill
                where = (mask, fill, 0.0) if hides else (mask, 0.0, fill)
                mask = g.call_function(torch.where, where)
                added.append(mask)
        if m.key_bias is not None:  # a bias beside the boolean mask: one additive mask
            bias, heads = m.key_bias
            if heads is not None:  # added to BLOOM's [B * H, Sq, Sk] scores
                bias = g.call_method("unflatten", (bias, 0, (-1, heads)))
                added.append(bias)
            boolean = mask is not None and m.mask_fill is None
            if boolean and example_value(m.attn_mask).dtype == torch.bool:
                bias = g.call_function(torch.where, (mask, bias, -math.inf))
                added.append(bias)
            elif mask is not None:  # two floating biases (`mask_reading._two_biases`): their sum
                bias = g.call_function(operator.add, (mask, bias))
                added.append(bias)
            mask = bias
        win = None
        if isinstance(m.window, tuple):  # a two-sided band (causal False): (left, right)
            win = list(m.window)
        elif m.window is not None:  # a causal window (from the bottom-right diagonal too)
            win = [m.window - 1, 0]
        tail = [win, m.softcap, m.align, None, None, mask]
        while tail and (tail[-1] is None or (len(tail) == 3 and tail[-1] == "top_left")):
            tail.pop()  # trailing defaults left out
        extra = {"dropout_p": m.dropout_p} if m.dropout_p else {}
        if m.alibi is not None:
            extra["alibi_slopes"] = _slopes_arg(g, m, added)
        if m.sinks is not None:  # one logit per query head: the op's [Hq]
            extra["sinks"] = g.call_method("reshape", (m.sinks, -1))
            added.append(extra["sinks"])
        new = g.call_function(op, (*args, m.causal, m.scale, *tail), extra)
        result = g.call_method("squeeze", (new, 0)) if m.three_d else new
        after = [] if result is new else [result]
        if m.empty_rows is not None:  # rows the mask hides entirely: eager's uniform softmax
            hidden, hides = m.rows_from or (m.attn_mask, m.mask_hides)
            if not hides:
                hidden = g.call_function(torch.logical_not, (hidden,))
                after.append(hidden)
            empty = g.call_method("all", (hidden, -1, True))
            mean = g.call_method("mean", (m.empty_rows, -2, True))
            after += [empty, mean]
            if m.autocast is not None:  # (eager's uniform row: autocast's P V, in its dtype)
                mean = g.call_method("to", (mean, m.autocast))
                after.append(mean)
            result = g.call_function(torch.where, (empty, mean, result))
            after.append(result)
        if m.flat_out:  # BLOOM: the value product's [B * H, Sq, D]
            result = g.call_method("flatten", (result, 0, 1))
            after.append(result)
    set_example_values(fm, [*added, new, *after])
    new.meta["stack_trace"] = m.out.meta.get("stack_trace")
    dead = [*m.interior, m.out]
    m.out.replace_all_uses_with(result)
    erase_dead(g, dead)


def attention_pass(
    gm: fx.GraphModule,
    example_inputs: list[Any],
    op: Any = None,
    *,
    rewrite_graph: bool = True,
    graph_index: int = 0,
    keep_kinds: frozenset[str] = frozenset(),
) -> list[Site]:
    """Find every attention site; replace the eligible ones with `op` (None: report only).

    Sites of a kind in `keep_kinds` ("sdpa", "mha") are matched and reported but left to
    PyTorch (`flashgen.backend(sdpa=False)`), and so is an SDPA or nn.MultiheadAttention call
    whose static shape makes the op run the kernel PyTorch's own call picks
    (`choice.keep_reason`). Masks added to scores viewed per window are read on the 4-D scores
    while the pass runs (`window_views`), kept so only where the site is replaced."""
    values = Values(gm, example_inputs)
    folds = window_views.fold(gm)
    sites, matches = _fused_layers(gm, values, op, rewrite_graph, graph_index, keep_kinds)
    written = {m.interior[0] for m in matches}  # (their MHA calls: matched already)
    for n in list(gm.graph.nodes):
        if n in written:
            continue
        kind = (
            "sdpa"
            if is_fn(n, SDPA_FNS)
            else "mha"
            if is_fn(n, {F.multi_head_attention_forward})
            else "softmax"
            if is_softmax(n)
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
                if not softmax_dim_ok(n):
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
        if m.site.kind in keep_kinds:
            m.site.reason = "left to PyTorch's fused attention: backend(sdpa=False)"
            counters[f"{m.site.kind}.skipped"] += 1
        elif (kept := keep_reason(m)) is not None:
            m.site.reason = kept
            counters[f"{m.site.kind}.skipped"] += 1
            counters[f"{m.site.kind}.kept"] += 1
        elif not rewrite_graph:
            m.site.replaced = True  # report-only (explain): "would be replaced"
        elif op is None:
            m.site.reason = "the flashgen::attention op is not available (flashgen.ops)"
            counters[f"{m.site.kind}.skipped"] += 1
        else:
            (rewrite_mha if m.mha is not None else rewrite)(gm, m, op)
            m.site.replaced = True
            counters[f"{m.site.kind}.replaced"] += 1
    for f in folds:
        f.settle(gm.graph)
    if rewrite_graph and op is not None and any(m.site.replaced for m in matches):
        gm.graph.lint()
        gm.recompile()
    for body, inputs, call in checkpoint.bodies(gm, values.by_node):
        sites += _body_sites(
            gm, body, inputs, call, values.by_node, op, rewrite_graph, graph_index, keep_kinds
        )  # fmt: skip
    return sites


def _fused_layers(
    gm: fx.GraphModule,
    values: Values,
    op: Any,
    rewrite_graph: bool,
    graph_index: int,
    keep_kinds: frozenset[str],
) -> tuple[list[Site], list[Match]]:
    """nn.TransformerEncoderLayer's fused inference op (`encoder_layer`): written out as the
    unfused layer where its attention would be replaced, that attention's match returned for
    `attention_pass` to replace (with the sites: every fused layer's); left fused, and
    reported with the reason, everywhere else. A report-only pass leaves every fused node as
    it was and reports the sites it would replace."""
    sites: list[Site] = []
    matches: list[Match] = []
    for n in list(gm.graph.nodes):
        if not encoder_layer.is_fused_layer(n):
            continue
        kept, m = None, None
        if "mha" in keep_kinds:
            kept = "left to PyTorch's fused attention: backend(sdpa=False)"
        else:
            try:
                e = encoder_layer.expand(gm, n)
            except Skip as err:
                kept = str(err)
            else:
                try:
                    m = match_mha(e.mha, values)
                    check_mha(m)
                    encoder_layer.agrees(m)
                    kept = fused_layer_keep_reason(m) or keep_reason(m)
                    if kept is not None:
                        counters["mha.kept"] += 1
                    elif rewrite_graph and op is None:  # (as the loop below says it)
                        kept = "the flashgen::attention op is not available (flashgen.ops)"
                except Skip as err:
                    kept = str(err)
                if kept is not None or not rewrite_graph:
                    e.undo(gm.graph)
                else:
                    e.commit(gm.graph)
        if kept is None:
            assert m is not None
            site = m.site
            if rewrite_graph:
                matches.append(m)  # (replaced by `attention_pass`, which counts it)
            else:
                site.replaced = True  # report-only: "would be replaced"
        else:
            site = Site(kind="mha", location=location(n), reason=kept)
            counters["mha.skipped"] += 1
        site.graph = graph_index
        counters["mha.found"] += 1
        sites.append(site)
    return sites, matches


def _body_sites(
    gm, body, inputs, call, real, op, rewrite_graph, graph_index, keep_kinds
) -> list[Site]:
    """`attention_pass` over one activation-checkpointed body (`checkpoint`), with the parent's
    computation of its mask operands copied in where that lets more sites be replaced, or as
    many read less of a mask tensor (`checkpoint.cost`): the body as it is and with the copy
    are read report-only, the copy kept or undone, and only then is the body rewritten.
    `counters` count one pass, the one chosen. A report-only pass (`rewrite_graph=False`)
    leaves both graphs as they were."""
    kw = {"graph_index": graph_index, "keep_kinds": keep_kinds}
    try:
        operands = checkpoint.mask_operands(call, body)
        if operands:
            before = counters.copy()
            plain = attention_pass(body, inputs, op, rewrite_graph=False, **kw)
            counted = counters.copy()
            counters.clear()
            counters.update(before)
            change = checkpoint.inline_masks(gm, call, body, real, operands)
            trial = attention_pass(body, [*inputs, *change.inputs], op, rewrite_graph=False, **kw)
            copy = checkpoint.cost(trial) < checkpoint.cost(plain)
            if copy and rewrite_graph:
                inputs = change.keep(inputs)
            else:
                change.undo()
            if not rewrite_graph:  # (the chosen reading's counts stand)
                if not copy:
                    counters.clear()
                    counters.update(counted)
                return trial if copy else plain
            counters.clear()
            counters.update(before)
        return attention_pass(body, inputs, op, rewrite_graph=rewrite_graph, **kw)
    finally:
        checkpoint.unlend(body)


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
        if split_baddbmm(x) is not None:
            return "baddbmm"
        ins = [a for a in x.all_input_nodes if is_tensor_node(a)]
        x = ins[0] if ins else None
    return "matmul"
