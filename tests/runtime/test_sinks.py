"""Attention sinks (`flashgen.attention(..., sinks=)`, `flashgen.runtime.sinks`) against a float64
reference written as GPT-OSS's eager attention writes it: the sink logit concatenated to each
row's scores, the softmax, the sink's column dropped. Forward and every gradient (the sinks'
too), beside the other arguments, with rows that see no key, and under torch.compile."""

from __future__ import annotations

import pytest
import torch

import flashgen


def reference(q, k, v, sinks, causal=False, visible=None, scale=None, softcap=None):
    """Float64 attention with sinks; `visible` a boolean [B or 1, H or 1, Sq, Sk] (True: seen)."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = s.shape[-2:]
    if causal:
        s = s.masked_fill(~torch.ones(sq, sk, dtype=torch.bool).tril(), float("-inf"))
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    sink = sinks.double().reshape(1, -1, 1, 1).expand(s.shape[0], -1, sq, 1)
    probs = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    return probs @ v


def leaves(b, hq, hkv, sq, sk, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=g).requires_grad_()
    k = torch.randn(b, hkv, sk, d, generator=g).requires_grad_()
    v = torch.randn(b, hkv, sk, d, generator=g).requires_grad_()
    sinks = (torch.randn(hq, generator=g) * 2).requires_grad_()
    return q, k, v, sinks


def check(got, want, inputs, tol=2e-5):
    assert torch.isfinite(got).all()
    assert (got.double() - want).abs().max().item() < tol
    dout = torch.randn(got.shape, generator=torch.Generator().manual_seed(3))
    ours = torch.autograd.grad(got, inputs, dout)
    theirs = torch.autograd.grad(want, inputs, dout.double())
    for name, a, b in zip(("q", "k", "v", "sinks"), ours, theirs, strict=True):
        assert torch.isfinite(a).all(), name
        assert (a.double() - b).abs().max().item() < tol * max(1.0, b.abs().max().item()), name


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,causal",
    [(2, 4, 2, 9, 13, 16, False), (2, 4, 2, 13, 13, 16, True), (1, 2, 2, 70, 129, 32, False),
     (1, 3, 1, 150, 150, 24, True)],
)  # fmt: skip
def test_sinks_match_float64(b, hq, hkv, sq, sk, d, causal):
    """Plain calls with GQA, odd lengths and head dims, more keys than one block (the split
    backward) and fewer (the short one)."""
    q, k, v, sinks = leaves(b, hq, hkv, sq, sk, d)
    got = flashgen.attention(q, k, v, causal=causal, sinks=sinks)
    check(got, reference(q, k, v, sinks, causal), (q, k, v, sinks))


def test_a_decoding_step_with_sinks():
    """A short query over a KV cache (the split-KV decode kernels, bottom-right causal): their
    logsumexp serves the sinks as the forward kernels' does."""
    q, k, v, sinks = leaves(2, 4, 2, 3, 300, 16, seed=8)
    got = flashgen.attention(q, k, v, causal=True, causal_align="bottom_right", sinks=sinks)
    i, j = torch.arange(3)[:, None], torch.arange(300)[None, :]
    visible = (j <= i + 297)[None, None]
    check(got, reference(q, k, v, sinks, visible=visible), (q, k, v, sinks))


def test_sinks_beside_a_window_softcap_and_scale():
    q, k, v, sinks = leaves(2, 4, 2, 33, 33, 16, seed=1)
    got = flashgen.attention(q, k, v, causal=True, window=5, softcap=3.0, scale=0.3, sinks=sinks)
    i = torch.arange(33)
    visible = (i[None, :] > i[:, None] - 5)[None, None]
    want = reference(q, k, v, sinks, True, visible, scale=0.3, softcap=3.0)
    check(got, want, (q, k, v, sinks))


def test_rows_that_see_no_key_give_zeros():
    """A boolean mask hiding every key of some rows: eager puts all of their probability on the
    sink (zeros out), and so do the kernels (their lse of such a row is +inf), with finite
    gradients that the hidden rows do not reach."""
    q, k, v, sinks = leaves(2, 2, 2, 11, 17, 16, seed=2)
    visible = torch.rand(2, 1, 11, 17, generator=torch.Generator().manual_seed(4)) > 0.4
    visible[0, :, 3] = False
    visible[1, :, :2] = False
    got = flashgen.attention(q, k, v, attn_mask=visible, sinks=sinks)
    assert got[0, :, 3].abs().max() == 0 and got[1, :, :2].abs().max() == 0
    check(got, reference(q, k, v, sinks, visible=visible), (q, k, v, sinks))


@pytest.mark.parametrize("padding", ["right", "left"])
def test_sinks_beside_key_and_query_lengths(padding):
    """Padded rows come back as zeros (their gradients too), whatever the kernels leave in
    their logsumexp."""
    q, k, v, sinks = leaves(3, 2, 1, 19, 19, 16, seed=5)
    lengths = torch.tensor([19, 7, 12])
    got = flashgen.attention(
        q, k, v, causal=True, key_lengths=lengths, query_lengths=lengths, padding=padding,
        sinks=sinks,
    )  # fmt: skip
    pos = torch.arange(19)
    valid = pos[None, :] < lengths[:, None]
    if padding == "left":
        valid = valid.flip(-1)
    # causal from each valid range's start: with queries and keys padded alike, plain causal
    visible = valid[:, None, None, :] & valid[:, None, :, None]
    want = reference(q, k, v, sinks, True, visible) * valid[:, None, :, None]
    check(got * valid[:, None, :, None], want, (q, k, v, sinks))
    assert got[~valid[:, None, :, None].expand_as(got)].abs().max() == 0


def test_sink_limits():
    """A sink far below every score is no sink; one far above takes all the probability."""
    q, k, v, _ = leaves(1, 2, 2, 8, 8, 16, seed=6)
    with torch.no_grad():
        plain = flashgen.attention(q, k, v, causal=True)
        low = flashgen.attention(q, k, v, causal=True, sinks=torch.full((2,), -1e4))
        high = flashgen.attention(q, k, v, causal=True, sinks=torch.full((2,), 1e4))
    assert torch.allclose(low, plain, atol=1e-6)
    assert high.abs().max() == 0


def test_only_the_sinks_need_a_gradient():
    q, k, v, sinks = leaves(1, 2, 2, 8, 8, 16, seed=7)
    q, k, v = (t.detach() for t in (q, k, v))
    got = flashgen.attention(q, k, v, sinks=sinks)
    want = reference(q, k, v, sinks)
    (a,) = torch.autograd.grad(got.sum(), sinks)
    (b,) = torch.autograd.grad(want.sum(), sinks)
    assert (a.double() - b).abs().max() < 1e-5


def test_compiled_function_with_sinks_matches_eager():
    """`flashgen.attention(sinks=)` inside `torch.compile(fullgraph=True, dynamic=True)`: one
    graph for two lengths, forward and gradients as eager."""

    def fn(q, k, v, sinks):
        return flashgen.attention(q, k, v, causal=True, sinks=sinks)

    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (9, 14):
        q, k, v, sinks = leaves(2, 4, 2, n, n, 16, seed=n)
        check(compiled(q, k, v, sinks), reference(q, k, v, sinks, True), (q, k, v, sinks))


@pytest.mark.parametrize(
    "sinks,kwargs,match",
    [(torch.zeros(3), {}, "one logit per query head"),
     (torch.zeros(2, 1), {}, "one logit per query head"),
     (torch.zeros(2, dtype=torch.int64), {}, "floating"),
     ([0.0, 0.0], {}, "must be a tensor"),
     (torch.zeros(2), {"dropout_p": 0.1}, "dropout_p"),
     (torch.zeros(2), {"impl": "sdpa_flash"}, "sinks and alibi_slopes run flashgen")],
)  # fmt: skip
def test_bad_sinks_name_the_argument(sinks, kwargs, match):
    q = k = v = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match=match):
        flashgen.attention(q, k, v, sinks=sinks, **kwargs)
