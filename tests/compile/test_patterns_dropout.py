"""Attention dropout in compiled graphs: hand-written F.dropout in training mode, SDPA's
dropout_p and nn.MultiheadAttention's dropout are replaced by the flashgen op with the kernels'
dropout, and the compiled result is exact against float64 given the mask the kernels drew.

How the mask is recovered from a compiled call: with head dim = key length and V the identity,
out[i, j] = P[i, j] * keep[i, j] / (1 - p), and P (the undropped softmax) is computed in
float64, so keep = out > 0. Forward and backward of one call share that mask, so the gradients
are checked against the float64 expression with it. A fresh seed is drawn from PyTorch's
generator at every call: `torch.manual_seed` reproduces a compiled run.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend
from flashgen.compile.patterns import attention_pass

B, H, T = 2, 2, 16  # head dim = T: V = identity shows the mask
P = 0.25
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def handwritten(q, k, v):
    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
    return F.dropout(att, p=P, training=True) @ v


class SdpaDropout(nn.Module):
    """The HF/nanoGPT spelling: dropout_p=self.p if self.training else 0.0."""

    def forward(self, q, k, v):
        p = P if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, T, generator=g).to(DEVICE)
    k = torch.randn(B, H, T, T, generator=g).to(DEVICE)
    v = torch.eye(T).expand(B, H, T, T).contiguous().to(DEVICE)
    return [x.requires_grad_() for x in (q, k, v)]


def _probs(q, k, causal):
    s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    return torch.softmax(s, -1)


def _check(model, causal):
    qkv = _inputs()
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    torch.manual_seed(5)
    out = compiled(*qkv)
    after = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    assert after - before == 1, "the site was not replaced by flashgen::attention"
    probs = _probs(qkv[0].detach(), qkv[1].detach(), causal)
    keep = out.detach().double() > 0
    # the kept entries are exactly P / (1 - p), the dropped ones exactly 0
    torch.testing.assert_close(out.double(), probs * keep / (1 - P), atol=1e-5, rtol=1e-4)
    visible = probs > 0
    dropped = 1 - keep[visible].double().mean().item()
    assert 0.1 < dropped < 0.4, dropped  # ~P of the visible entries
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, qkv, do)
    ref_in = [x.detach().double().requires_grad_() for x in qkv]
    ref = (_probs(ref_in[0], ref_in[1], causal) * keep / (1 - P)) @ ref_in[2]
    want = torch.autograd.grad(ref, ref_in, do.double())
    for name, g, w in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")
    torch.manual_seed(5)
    assert torch.equal(compiled(*qkv), out)  # same seed, same mask
    return compiled


def test_handwritten_dropout_in_training_is_replaced_and_exact():
    _check(handwritten, causal=False)


def test_sdpa_dropout_is_replaced_and_exact_and_eval_is_plain():
    model = SdpaDropout().to(DEVICE)
    _check(model, causal=True)
    model.eval()
    torch._dynamo.reset()
    q, k, v = _inputs()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    torch.testing.assert_close(
        compiled(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
        atol=1e-5, rtol=1e-5,
    )  # fmt: skip


def test_explain_reports_the_dropout():
    report = flashgen.explain(handwritten, *_inputs())
    (site,) = report.sites
    assert site.replaced and site.dropout == pytest.approx(P)
    assert "dropout 0.25" in str(report)


def test_multihead_attention_dropout_in_training_is_replaced():
    mha = nn.MultiheadAttention(32, 2, dropout=0.1, batch_first=True).to(DEVICE)
    x = torch.randn(B, T, 32, device=DEVICE)
    report = flashgen.explain(lambda x: mha(x, x, x, need_weights=False)[0], x)
    assert (report.found, report.replaced) == (1, 1), str(report)
    assert report.sites[0].dropout == pytest.approx(0.1)


def padded(q, k, v, keep, fill=torch.finfo(torch.float32).min):
    """HF's eager padding in its masking_utils spelling: `where(full & keep, 0, finfo.min)`
    added to the scores, with a [B, 1, T, T] mask whose rows are all alike."""
    full = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
    bias = torch.where(keep[:, None, None, :] & full, 0.0, fill)
    att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + bias, dim=-1)
    return F.dropout(att, p=P, training=True) @ v


@pytest.mark.parametrize("fill", [torch.finfo(torch.float32).min, torch.finfo(torch.float16).min])
def test_an_additive_padding_mask_with_dropout_is_read_one_row_and_exact(fill):
    """Beside dropout, HF's additive padding mask cannot be split into `keep` plus eager's
    uniform rows (dropout drops entries of those rows); its rows are all alike, so the kernels
    read its first row: a per-key additive mask with the tensor's own values. A batch entry
    whose keys are all padding gets eager's row (uniform with float32's finfo.min; float16's
    leaves it the scores' softmax), dropped as eager drops it."""
    qkv = _inputs()
    padded_here = functools.partial(padded, fill=fill)
    keep = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    keep[0, 11:] = False
    # every key hidden: a uniform softmax in eager. With float16's finfo.min the scores of such
    # a row are s - 65504 in float32, whose rounding (an ulp of 2**-7) eager shares but the
    # float64 reference does not: there entry 1 keeps its first 5 keys.
    keep[1, 5 if fill > -1e5 else 0 :] = False
    (site,) = flashgen.explain(padded_here, *qkv, keep).sites
    assert site.replaced and site.mask == "add" and site.key_mask, site
    torch._dynamo.reset()
    compiled = torch.compile(padded_here, backend=backend(fallback="aot_eager"))
    torch.manual_seed(5)
    out = compiled(*qkv, keep)
    q, k = (x.detach().double() for x in qkv[:2])
    bias = torch.where(keep[:, None, None, :], 0.0, fill).double()
    probs = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(T) + bias, -1)
    dropped = out.detach().double() > 0
    torch.testing.assert_close(out.double(), probs * dropped / (1 - P), atol=1e-5, rtol=1e-4)
    assert not dropped[0, ..., 11:].any()  # entry 0's padding keys: weight 0
    share = 1 - dropped[1][probs[1] > 0].double().mean().item()  # entry 1's, dropped at ~P
    assert 0.1 < share < 0.4, share
    assert _op_mask_shapes(padded_here, *qkv, keep) == [torch.Size([B, 1, 1, T])]


def filled(q, k, v, keep, fill=torch.finfo(torch.float32).min, bias=None, rows=False):
    """HF XLM's spelling: a per-key boolean mask applied with masked_fill(finfo.min) (a bias
    added first with `bias`); `rows`: DeBERTa's, the padding's outer product with itself."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if bias is not None:
        s = s + bias
    hide = ~keep[:, None, None, :]
    if rows:
        hide = ~(keep[:, None, :, None] & keep[:, None, None, :])
    return F.dropout(torch.softmax(s.masked_fill(hide, fill), dim=-1), p=P, training=True) @ v


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_filled_per_key_mask_with_dropout_is_read_as_its_additive_fill(with_bias):
    """A boolean mask applied with an absorbing fill beside dropout: a row it hides whole is
    uniform in eager and dropout drops entries of it, which the rows' mean of v (the boolean
    reading's) cannot follow; per key, the kernels get `where(hidden, fill, 0)` instead (with
    a bias: plus it), eager's rows, dropped by the kernels' dropout. Exact given the mask
    drawn, those rows included, and so are the gradients of a loss that does not read the
    rows of an entry that is all padding (one that does: v's share of them is eager's alone,
    `mask_reading._dropout_fill`)."""
    qkv = _inputs()
    keep = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    keep[0, 11:] = False  # right padding
    keep[1, :] = False  # an entry that is all padding: every row hidden whole
    bias = (
        torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(3)) if with_bias else None
    )
    fn = functools.partial(filled, bias=bias)
    (site,) = flashgen.explain(fn, *qkv, keep).sites
    assert site.replaced and site.mask == "add" and site.dropout == pytest.approx(P), site
    assert site.key_mask != with_bias  # (with the bias: a dense mask, the sum)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend(fallback="aot_eager"))
    torch.manual_seed(5)
    out = compiled(*qkv, keep)
    q, k, v = (x.detach().double().requires_grad_() for x in qkv)
    s = q @ k.transpose(-2, -1) / math.sqrt(T) + (0 if bias is None else bias.double())
    probs = torch.softmax(s.masked_fill(~keep[:, None, None, :], torch.finfo().min), -1)
    dropped = out.detach().double() > 0
    want = probs * dropped / (1 - P)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-4)
    assert torch.allclose(probs[1], torch.full_like(probs[1], 1 / T))  # (uniform rows)
    share = 1 - dropped[1].double().mean().item()  # dropped at ~P
    assert 0.1 < share < 0.4, share
    do = torch.randn_like(out)
    do[1] = 0  # (a loss that does not read the entry of padding alone)
    got = torch.autograd.grad(out, qkv, do)
    wanted = torch.autograd.grad(want @ v, (q, k, v), do.double())
    for name, g, w in zip("qkv", got, wanted, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")


@pytest.mark.parametrize("case", ["outer_product", "fill_1e9"])
def test_a_filled_mask_with_dropout_stays_where_it_is_not_exact(case):
    """DeBERTa's outer product hides every padded query row (a loss reading the padding's
    outputs would get another gradient for v); a fill of -1e9 does not absorb the scores
    (score + fill is not the fill): both stay PyTorch's."""
    qkv = _inputs()
    keep = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    keep[0, 11:] = False
    kw = {"rows": True} if case == "outer_product" else {"fill": -1e9}
    (site,) = flashgen.explain(functools.partial(filled, **kw), *qkv, keep).sites
    assert not site.replaced and "dropout on the rows it hides" in site.reason, site


def _op_mask_shapes(fn, *args):
    """The shapes of the attn_mask tensors the rewritten graph hands flashgen's op, from a run
    of that graph (`ShapeProp`)."""
    from torch.fx.passes.shape_prop import ShapeProp

    shapes = []

    def compile_graph(gm, example_inputs):
        attention_pass(gm, list(example_inputs), torch.ops.flashgen.attention.default)
        gm.recompile()
        ShapeProp(gm).propagate(*example_inputs)
        for n in gm.graph.nodes:
            if n.target is torch.ops.flashgen.attention.default:
                mask = n.args[10] if len(n.args) > 10 else n.kwargs.get("attn_mask")
                shapes.append(mask.meta["tensor_meta"].shape)
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=compile_graph)(*args)
    finally:
        torch._dynamo.reset()
    return shapes


def test_sdpa_and_hf_berts_eager_attention_read_such_a_mask_per_key():
    """The same first-row reading for SDPA given that additive mask with dropout_p, and for HF
    BERT's eager attention in training (its attention dropout beside the padding mask), which
    read their padding as a dense [B, 1, T, T] mask before."""

    def sdpa(q, k, v, keep):
        full = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device)
        bias = torch.where(keep[:, None, None, :] & full, 0.0, torch.finfo(torch.float32).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=P)

    qkv = _inputs()
    keep = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    keep[0, 9:] = False
    (site,) = flashgen.explain(sdpa, *qkv, keep).sites
    assert site.replaced and site.mask == "add" and site.key_mask, site
    assert _op_mask_shapes(sdpa, *qkv, keep) == [torch.Size([B, 1, 1, T])]
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(
        hidden_size=32, num_attention_heads=2, intermediate_size=64, num_hidden_layers=2,
        vocab_size=50, attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.BertModel(cfg, add_pooling_layer=False).to(DEVICE).train()
    model.set_attn_implementation("eager")
    ids = torch.randint(1, 50, (2, 11), device=DEVICE)
    mask = torch.ones(2, 11, dtype=torch.long, device=DEVICE)
    mask[1, 7:] = 0
    sites = flashgen.explain(model, input_ids=ids, attention_mask=mask).sites
    assert len(sites) == 2, sites
    assert all(s.replaced and s.dropout and s.mask == "add" and s.key_mask for s in sites), sites


def test_the_row_reading_holds_for_every_length_of_a_dynamic_graph():
    """The first-row slice is taken on the graph's symbolic lengths: one graph compiled with
    dynamic lengths serves 20 and 28 keys, exact against float64 given the drawn mask (head dim
    16: v = the first 16 columns of the identity shows those keys' dropped probabilities)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    compiled = torch.compile(padded, backend=backend(fallback="aot_eager"), dynamic=True)
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    graphs = counters["stats"]["unique_graphs"]
    for n in (20, 28):
        g = torch.Generator().manual_seed(n)
        q, k = (torch.randn(B, H, n, T, generator=g).to(DEVICE) for _ in range(2))
        v = torch.eye(n, T).expand(B, H, n, T).contiguous().to(DEVICE)
        keep = torch.ones(B, n, dtype=torch.bool, device=DEVICE)
        keep[0, n - 5 :] = False
        torch.manual_seed(n)
        out = compiled(q, k, v, keep)
        bias = torch.where(keep[:, None, None, :], 0.0, torch.finfo(torch.float32).min)
        s = q.double() @ k.double().transpose(-2, -1) / math.sqrt(T) + bias.double()
        probs = torch.softmax(s, -1)[..., :T]
        dropped = out.double() > 0
        torch.testing.assert_close(out.double(), probs * dropped / (1 - P), atol=1e-5, rtol=1e-4)
    after = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    assert after > before  # the site was replaced
    assert counters["stats"]["unique_graphs"] == graphs + 1  # one graph: symbolic lengths


def cache_dropout(q, k, v):
    """A KV cache's attention in training: queries are the last Sq positions, the mask compares
    their positions with the keys' (bottom-right causal), then F.dropout."""
    sq, sk = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(sq, device=q.device) + (sk - sq)
    keep = torch.arange(sk, device=q.device)[None, :] <= q_pos[:, None]
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)
    return F.dropout(att, p=P, training=True) @ v


def test_dropout_beside_a_bottom_right_causal_mask_is_replaced_and_exact():
    """Dropout with the bottom-right alignment (a cache's keys, more keys than queries): one
    site, causal_align bottom_right with the kernels' dropout, exact against float64 given the
    mask recovered from the output (V the identity), forward and gradients."""
    sq = 6
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, sq, T, generator=g).to(DEVICE).requires_grad_()
    k = torch.randn(B, H, T, T, generator=g).to(DEVICE).requires_grad_()
    v = torch.eye(T).expand(B, H, T, T).contiguous().to(DEVICE).requires_grad_()
    report = flashgen.explain(cache_dropout, q, k, v)
    (site,) = report.sites
    assert site.replaced and site.align == "bottom_right", str(report)
    assert site.dropout == pytest.approx(P)
    torch._dynamo.reset()
    compiled = torch.compile(cache_dropout, backend=backend(fallback="aot_eager"))
    torch.manual_seed(5)
    out = compiled(q, k, v)

    def probs(q, k):
        s = (q.double() @ k.double().transpose(-2, -1)) / math.sqrt(T)
        i = torch.arange(sq, device=s.device)[:, None]
        j = torch.arange(T, device=s.device)[None, :]
        return torch.softmax(s.masked_fill(j > i + T - sq, -math.inf), -1)

    p = probs(q.detach(), k.detach())
    keep = out.detach().double() > 0
    torch.testing.assert_close(out.double(), p * keep / (1 - P), atol=1e-5, rtol=1e-4)
    dropped = 1 - keep[p > 0].double().mean().item()
    assert 0.1 < dropped < 0.45, dropped
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    ref_in = [x.detach().double().requires_grad_() for x in (q, k, v)]
    want = torch.autograd.grad(
        (probs(ref_in[0], ref_in[1]) * keep / (1 - P)) @ ref_in[2], ref_in, do.double()
    )
    for name, gg, w in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(gg.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")
