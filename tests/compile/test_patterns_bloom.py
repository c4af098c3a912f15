"""HF BLOOM (built from a config, no download) and BLOOM's layout written by hand (issue 16).

BLOOM computes its scores as `alibi.baddbmm(q, k^T, beta=1, alpha=1/sqrt(d))` on q/k/v
flattened to [B * H, T, D], views them as [B, H, T, T], adds HF's causal mask, and its softmax
and P @ V go back through [B * H, T, T]. Without an attention_mask its ALiBi is
`(slopes[:, None, None] * arange(T)).repeat(B, 1, 1)`: slope_h * j, which differs from the
kernels' slope_h * (j - i) by a constant per row (the softmax is the same), added unscaled to
the scaled scores, as the kernels add theirs. The pass proves it for every length the graph
accepts and hands the op causal=True and the slopes; output and gradients equal eager's.

With an attention_mask the positions are `(cumsum(mask) - 1) * mask`, a function of the mask's
values: not slope * position for every mask the graph accepts, so it is not taken as ALiBi. It
is read as the tensor it is, a per-key bias [B * H, 1, T], beside HF's causal & padding mask,
which splits into the causal flag and the per-key padding: the op gets causal=True and one
additive mask `where(keep, bias, -inf)` of shape [B, H, 1, T], and rows the padding hides
whole (left padding) get eager's uniform softmax. A baddbmm whose bias is not ALiBi is never
taken as ALiBi: beside a causal mask it is read as a tensor too.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from model_checks import (
    inputs_match_eager,
    lengths_match_eager,
    params_match_eager,
    slopes_seen,
    token_ids,
)

import flashgen
from flashgen.compile.backend import backend
from flashgen.compile.patterns import counters
from flashgen.kernels.alibi import standard_slopes

transformers = pytest.importorskip("transformers")

H = 4


def _bloom(dtype=torch.float32):
    torch.manual_seed(0)
    cfg = transformers.BloomConfig(hidden_size=64, n_head=H, n_layer=2, vocab_size=100)
    return transformers.BloomForCausalLM(cfg).to(dtype).eval()


def test_bloom_sites_replaced_as_causal_alibi():
    report = flashgen.explain(_bloom(), token_ids(19))
    assert report.found == 2, str(report)
    for site in report.sites:
        assert site.replaced and site.causal is True and site.alibi and not site.mask, site
        assert site.kind == "baddbmm" and site.scale == pytest.approx(1 / math.sqrt(16)), site
        assert site.shape.startswith("q[2x4x19x16]"), site  # the [B, H, T, D] q, not [B*H, ..]


@pytest.mark.parametrize("dynamic", [False, True])
def test_bloom_matches_eager(monkeypatch, dynamic):
    """Forward and gradients; the kernels got BLOOM's slopes (the paper's, one per head).
    With `dynamic`, the second length recompiles with symbolic lengths and a third reuses that
    graph: the proof holds for every length it accepts."""
    seen = slopes_seen(monkeypatch)
    model = _bloom()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    lengths_match_eager(model, compiled, seen, (19, 33, 27) if dynamic else (19,))
    assert counters["baddbmm.replaced"] == (4 if dynamic else 2), dict(counters)
    assert counters["baddbmm.skipped"] == 0, dict(counters)
    for s in seen:
        torch.testing.assert_close(s.reshape(-1), standard_slopes(H))


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("dynamic", [False, None])
def test_bloom_attention_mask_bias_beside_padding(padding, dynamic):
    """An attention_mask (padded on either side, or all ones: the same graph) makes BLOOM's
    ALiBi positions depend on the mask's values: not ALiBi, so the bias is read as a tensor
    beside the causal flag and the per-key padding. Logits (the left-padded rows too, which
    eager makes uniform) and every parameter gradient equal eager's, at a second length too
    (with `dynamic` None, a graph with symbolic lengths: the rewrite holds for every length)."""
    model = _bloom()

    def mask_for(t):
        mask = torch.ones(2, t, dtype=torch.long)
        if padding == "left":
            mask[1, :5] = 0
        elif padding == "right":
            mask[1, t - 6 :] = 0
        return mask

    report = flashgen.explain(model, input_ids=token_ids(19), attention_mask=mask_for(19))
    assert report.found == 2 and report.replaced == 2, str(report)
    for site in report.sites:
        assert site.causal is True and not site.alibi and site.mask == "add", site
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"), dynamic=dynamic)
    for t in (19, 26):
        params_match_eager(model, compiled, input_ids=token_ids(t), attention_mask=mask_for(t))
    assert counters["baddbmm.skipped"] == 0, dict(counters)
    assert counters["baddbmm.replaced"] >= 2, dict(counters)


def test_bloom_attention_mask_kv_cache():
    """A padded batch's prefill and two decode steps with a KV cache (the steps' causal part is
    bottom-right, the bias and padding per key): replaced, logits equal eager's."""
    model = _bloom()
    ids = token_ids(9)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, use_cache=True)
        got = compiled(input_ids=ids, attention_mask=mask, use_cache=True)
        torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
        for _ in range(2):
            step = want.logits[:, -1].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            want = model(input_ids=step, attention_mask=mask, cache=want.cache, use_cache=True)
            got = compiled(input_ids=step, attention_mask=mask, cache=got.cache, use_cache=True)
            torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
    assert counters["baddbmm.skipped"] == 0, dict(counters)
    assert counters["baddbmm.replaced"] >= 4, dict(counters)


def test_bloom_kv_cache_decode_step():
    """With a KV cache, the prefill is replaced (causal + ALiBi), and so are the decode steps:
    their causal mask is bottom-right, which the op takes with the slopes (the decode kernels
    add ALiBi); every step's logits equal eager's."""
    model = _bloom()
    ids = token_ids(7)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    with torch.no_grad():
        got = compiled(input_ids=ids, use_cache=True)
        want = model(input_ids=ids, use_cache=True)
        torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
        assert counters["baddbmm.replaced"] == 2, dict(counters)
        step = want.logits[:, -1].argmax(-1, keepdim=True)
        # (explain runs the step: a copy of the cache, which it would extend)
        report = flashgen.explain(model, input_ids=step, cache=copy.deepcopy(want.cache))
        assert report.found == 2 and report.replaced == 2, str(report)
        for site in report.sites:
            assert site.causal is True and site.alibi and site.align == "bottom_right", site
        for _ in range(2):
            got = compiled(input_ids=step, cache=got.cache, use_cache=True)
            want = model(input_ids=step, cache=want.cache, use_cache=True)
            torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
            step = want.logits[:, -1].argmax(-1, keepdim=True)
    assert counters["baddbmm.skipped"] == 0, dict(counters)


def test_bloom_bfloat16_alibi_is_rounded():
    """A bf16 model rounds its ALiBi to bf16 before the add: not what the kernels compute
    (float32 slope * position), so it is not taken as ALiBi but read as the tensor it is."""
    report = flashgen.explain(_bloom(torch.bfloat16), token_ids(19))
    assert report.found == 2 and report.replaced == 2, str(report)
    for site in report.sites:
        assert site.causal is True and not site.alibi and site.mask == "add", site


class FlatAttention(torch.nn.Module):
    """BLOOM's layout by hand: baddbmm on [B * H, T, D], a tril causal mask on [B, H, T, T],
    bmm with V; `bias` picks what baddbmm adds."""

    def __init__(self, bias: str, beta: float = 1.0):
        super().__init__()
        self.kind, self.beta = bias, beta
        self.register_buffer("slopes", standard_slopes(H))
        self.register_buffer("tril", torch.tril(torch.ones(64, 64, dtype=torch.bool)))
        self.register_buffer("table", torch.randn(64, generator=torch.Generator().manual_seed(3)))

    def bias(self, b: int, t: int, device) -> torch.Tensor:
        pos = torch.arange(t, device=device)
        per_head = self.slopes[:, None, None]
        if self.kind == "alibi":  # BLOOM's: slope_h * j, tiled over the batch
            return (per_head * pos).repeat(b, 1, 1)
        if self.kind == "square":  # slope * j^2: not linear in the key position
            return (per_head * (pos * pos)).repeat(b, 1, 1)
        if self.kind == "interleave":  # row r gets slope r // b: not one slope per head
            return (per_head * pos).repeat_interleave(b, dim=0)
        if self.kind == "table":  # a learned-looking per-key bias, not slope * position
            return (per_head * self.table[:t]).repeat(b, 1, 1)
        raise AssertionError(self.kind)

    def forward(self, q, k, v):
        b, h, t, d = q.shape
        bias = self.bias(b, t, q.device)
        s = bias.baddbmm(
            q.reshape(b * h, t, d), k.reshape(b * h, t, d).transpose(-1, -2),
            beta=self.beta, alpha=1.0 / math.sqrt(d),
        )  # fmt: skip
        s = s.view(b, h, t, t).masked_fill(~self.tril[:t, :t], float("-inf"))
        p = s.softmax(-1)
        return torch.bmm(p.view(b * h, t, t), v.reshape(b * h, t, d)).view(b, h, t, d)


def _qkv(t, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(2, H, t, 16, generator=gen).requires_grad_() for _ in range(3)]


def _flat_matches_eager(model, t=21):
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    inputs_match_eager(model, compiled, *_qkv(t))


def test_flat_alibi_replaced():
    model = FlatAttention("alibi")
    site = flashgen.explain(model, *_qkv(21)).sites[0]
    assert site.replaced and site.causal is True and site.alibi, site
    _flat_matches_eager(model)
    assert counters["baddbmm.replaced"] == 1, dict(counters)


@pytest.mark.parametrize("bias", ["square", "interleave", "table"])
def test_flat_non_alibi_read_as_bias(bias):
    """A baddbmm bias that is not per-head slope * key position is not ALiBi: beside the
    proven causal mask it is read as a tensor (unflattened to [B, H, 1, T]); the compiled
    module's output and gradients equal eager's."""
    model = FlatAttention(bias)
    report = flashgen.explain(model, *_qkv(21))
    assert report.found == 1 and report.replaced == 1, str(report)
    site = report.sites[0]
    assert site.causal is True and not site.alibi and site.mask == "add", site
    _flat_matches_eager(model)
    assert counters["baddbmm.replaced"] == 1, dict(counters)


def test_flat_beta_not_taken():
    """A bias scaled by baddbmm's beta is neither ALiBi nor a bias the kernels add: skipped
    with the reason, and the compiled module equals eager."""
    model = FlatAttention("alibi", 2.0)
    report = flashgen.explain(model, *_qkv(21))
    assert report.found == 1 and report.replaced == 0, str(report)
    assert "beta=2.0" in report.sites[0].reason, report.sites[0].reason
    _flat_matches_eager(model)
    assert counters["baddbmm.replaced"] == 0, dict(counters)
