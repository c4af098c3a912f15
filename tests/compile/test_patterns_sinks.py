"""Attention sinks and the softmax's row-max shift in compiled graphs: hand-written attention
that concatenates one learned logit per head to each row of its scores, takes the softmax
(after subtracting the row's max, as GPT-OSS does, or not) and drops that column before the
value product is replaced by the flashgen op with `sinks=`, and matches float64 forward and
backward, the sinks' gradient included. A plain attention written `softmax(s - s.max(-1))` is
replaced too. Spellings that are not sinks (logits varying along the rows, a column kept) stay
as written, and so does dropout beside sinks, with the reason."""

from __future__ import annotations

import math

import pytest
import torch

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend

H, T, D = 4, 11, 16


def _scores(q, k):
    return (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)


def _causal(s):
    t = s.size(-2)
    hidden = torch.ones(t, s.size(-1), dtype=torch.bool, device=s.device).triu(1)
    return s.masked_fill(hidden, -math.inf)


class GptOss(torch.nn.Module):
    """GPT-OSS's eager spelling: additive causal mask, sinks reshaped and expanded, the
    concatenation, the row-max shift, softmax, the sink column dropped, a cast back."""

    def __init__(self, spelling="gpt_oss"):
        super().__init__()
        self.sinks = torch.nn.Parameter(torch.randn(H, generator=torch.Generator().manual_seed(9)))
        self.spelling = spelling

    def forward(self, q, k, v):
        s = _causal(_scores(q, k))
        b, h, t, _ = s.shape
        if self.spelling == "first":  # the sink column first, [..., 1:], no shift, amax
            sinks = self.sinks.view(h, 1, 1).expand(b, h, t, 1)
            logits = torch.cat([sinks, s], dim=3)
            probs = torch.softmax(logits, dim=-1)[:, :, :, 1:]
        elif self.spelling == "amax":
            sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
            logits = torch.cat([s, sinks], dim=-1)
            logits = logits - torch.amax(logits, dim=-1, keepdim=True).detach()
            probs = logits.softmax(-1)[..., :-1]
        else:
            sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
            logits = torch.cat([s, sinks], dim=-1)
            logits = logits - logits.max(dim=-1, keepdim=True).values
            probs = torch.nn.functional.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]
        return probs.to(v.dtype) @ v


def _reference(q, k, v, sinks):
    s = _causal(_scores(q, k))
    b, h, t, _ = s.shape
    both = torch.cat([s, sinks.reshape(1, h, 1, 1).expand(b, h, t, 1)], -1)
    return torch.softmax(both, -1)[..., :-1] @ v


def _inputs(seed=0, t=T):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, H, t, D, generator=g).requires_grad_() for _ in range(3)]


def _compiled_matches_float64(module, qkv, dynamic=None):
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    torch._dynamo.reset()
    out = torch.compile(module, backend=backend(fallback="aot_eager"), dynamic=dynamic)(*qkv)
    after = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    assert after - before == 1
    ref_in = [x.detach().double().requires_grad_() for x in qkv]
    sinks = module.sinks.detach().double().requires_grad_()
    ref = _reference(*ref_in, sinks)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)
    # the sinks matter: without them the output differs
    plain = torch.softmax(_causal(_scores(*ref_in[:2])), -1) @ ref_in[2]
    assert (plain - ref).abs().max() > 1e-2
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, [*qkv, module.sinks], do)
    want = torch.autograd.grad(ref, [*ref_in, sinks], do.double())
    for name, g, w in zip(("q", "k", "v", "sinks"), got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")


@pytest.mark.parametrize("spelling", ["gpt_oss", "first", "amax"])
def test_sinks_are_replaced_and_match_float64(spelling):
    module = GptOss(spelling)
    report = flashgen.explain(module, *(x.detach() for x in _inputs()))
    (site,) = report.sites
    assert site.replaced, site.reason
    assert site.sinks and site.causal is True
    assert "sinks" in str(report)
    _compiled_matches_float64(module, _inputs(seed=1))


def test_sinks_under_dynamic_shapes():
    """One graph with a symbolic length serves two lengths."""
    module = GptOss()
    _compiled_matches_float64(module, _inputs(seed=2, t=9), dynamic=True)
    q, k, v = _inputs(seed=3, t=14)
    got = torch.compile(module, backend=backend(fallback="aot_eager"), dynamic=True)(q, k, v)
    torch.testing.assert_close(got.double(), _reference(q, k, v, module.sinks).double(),
                               atol=1e-5, rtol=1e-4)  # fmt: skip


class Checkpointed(GptOss):
    """GPT-OSS's spelling inside an activation checkpoint (HF's gradient checkpointing): the
    region's body takes the max's (values, indices) pair apart and leaves the indices unread."""

    def forward(self, q, k, v):
        return torch.utils.checkpoint.checkpoint(super().forward, q, k, v, use_reentrant=False)


def test_sinks_inside_an_activation_checkpoint():
    module = Checkpointed()
    report = flashgen.explain(module, *(x.detach() for x in _inputs()))
    (site,) = report.sites
    assert site.replaced and site.sinks, site.reason
    _compiled_matches_float64(module, _inputs(seed=6))


def row_max_shift(q, k, v):
    """A plain attention with the numerically careful spelling (no sinks)."""
    s = _causal(_scores(q, k))
    s = s - s.max(-1, keepdim=True)[0]
    return torch.softmax(s, -1) @ v


def row_max_shift_of_the_product(q, k, v):
    """The shift of the bare product (q scaled first), no mask."""
    s = (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)
    return torch.softmax(s - torch.amax(s, -1, keepdim=True), -1) @ v


@pytest.mark.parametrize("fn", [row_max_shift, row_max_shift_of_the_product])
def test_a_row_max_shift_is_the_softmax_and_replaced(fn):
    qkv = _inputs(seed=4)
    causal = fn is row_max_shift
    report = flashgen.explain(fn, *(x.detach() for x in qkv))
    (site,) = report.sites
    assert site.replaced and not site.sinks and site.causal is causal, site.reason
    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend(fallback="aot_eager"))(*qkv)
    ref_in = [x.detach().double().requires_grad_() for x in qkv]
    s = _scores(*ref_in[:2])
    ref = torch.softmax(_causal(s) if causal else s, -1) @ ref_in[2]
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, qkv, do)
    want = torch.autograd.grad(ref, ref_in, do.double())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4)


class NotSinks(torch.nn.Module):
    """Look-alikes the kernels do not compute as sinks: logits varying along the rows, a shift
    by another tensor's max, dropout beside the sinks."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.sinks = torch.nn.Parameter(torch.randn(H))
        self.extra = torch.nn.Parameter(torch.randn(1, H, T, 1))

    def forward(self, q, k, v):
        s = _causal(_scores(q, k))
        b, h, t, _ = s.shape
        col = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
        if self.kind == "per_row":
            col = self.extra.expand(b, -1, -1, -1)
        logits = torch.cat([s, col], dim=-1)
        if self.kind == "other_max":
            logits = logits - s.max(-1, keepdim=True).values
        probs = torch.softmax(logits, -1)[..., :-1]
        if self.kind == "dropout":
            probs = torch.nn.functional.dropout(probs, p=0.1, training=True)
        return probs @ v


@pytest.mark.parametrize(
    "kind,reason",
    [("per_row", None), ("other_max", None), ("dropout", "dropout beside attention sinks")],
)
def test_what_is_not_sinks_stays_as_written(kind, reason):
    """Not recognised as attention at all (no site), or found and kept with the reason; the
    compiled module gives eager's result either way."""
    module = NotSinks(kind).eval() if kind != "dropout" else NotSinks(kind)
    q, k, v = (x.detach() for x in _inputs(seed=5))
    report = flashgen.explain(module, q, k, v)
    if reason is None:
        assert all(not s.replaced for s in report.sites), str(report)
        torch._dynamo.reset()
        got = torch.compile(module, backend=backend(fallback="aot_eager"))(q, k, v)
        torch.testing.assert_close(got, module(q, k, v))
    else:
        (site,) = report.sites
        assert not site.replaced and reason in site.reason, site.reason
