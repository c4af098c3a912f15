"""Values of another head dim than the queries' and keys' (latent attention,
`flashgen.runtime.value_dim`): `flashgen.attention` against float64 with every gradient, the
values narrower and wider than the keys, beside GQA, causal, a window, a mask, sinks and a
given scale; under torch.compile (dynamic); hand-written latent attention replaced by the
backend, SDPA's left to PyTorch; what is still refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import flashgen


def reference(q, k, v, *, causal=False, scale=None, window=None, visible=None, sinks=None):
    """Float64 attention with values of their own head dim."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    sq, sk = s.shape[-2:]
    i, j = torch.arange(sq, device=q.device)[:, None], torch.arange(sk, device=q.device)[None, :]
    hidden = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        hidden |= j > i
    if window is not None:
        hidden |= (j < i - window[0]) | (j > i + window[1])
    s = s.masked_fill(hidden, float("-inf"))
    if visible is not None:
        s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        col = sinks.double().reshape(1, -1, 1, 1).expand(s.shape[0], -1, sq, 1)
        return torch.softmax(torch.cat([s, col], -1), -1)[..., :-1] @ v
    return torch.softmax(s, -1) @ v


def leaves(b, hq, hkv, sq, sk, dqk, dv, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, dqk, generator=g).requires_grad_()
    k = torch.randn(b, hkv, sk, dqk, generator=g).requires_grad_()
    v = torch.randn(b, hkv, sk, dv, generator=g).requires_grad_()
    return q, k, v


def check(got, want, inputs, tol=2e-5):
    assert got.shape == want.shape
    assert (got.double() - want).abs().max().item() < tol
    dout = torch.randn(got.shape, generator=torch.Generator().manual_seed(7))
    ours = torch.autograd.grad(got, inputs, dout)
    theirs = torch.autograd.grad(want, inputs, dout.double())
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape
        assert (a.double() - b).abs().max().item() < tol * max(1.0, b.abs().max().item())


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,dqk,dv,causal",
    [(2, 4, 2, 9, 13, 24, 16, False), (2, 4, 4, 13, 13, 16, 32, True),
     (1, 2, 1, 70, 70, 40, 8, True), (1, 2, 2, 1, 20, 24, 16, False)],
)  # fmt: skip
def test_matches_float64(b, hq, hkv, sq, sk, dqk, dv, causal):
    """Narrower values (DeepSeek's side) and wider ones, GQA, more rows than one block, a
    decode step (one query row); the default scale is the keys' 1 / sqrt(d_qk)."""
    q, k, v = leaves(b, hq, hkv, sq, sk, dqk, dv)
    got = flashgen.attention(q, k, v, causal=causal)
    check(got, reference(q, k, v, causal=causal), (q, k, v))


def test_beside_a_window_mask_sinks_and_scale():
    q, k, v = leaves(2, 4, 2, 17, 17, 24, 16, seed=1)
    keep = torch.ones(2, 1, 1, 17, dtype=torch.bool)
    keep[1, ..., 12:] = False
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(2)).requires_grad_()
    got = flashgen.attention(q, k, v, causal=True, window=(4, 0), attn_mask=keep, sinks=sinks,
                             scale=0.3)  # fmt: skip
    want = reference(q, k, v, causal=True, window=(4, 0), visible=keep, sinks=sinks, scale=0.3)
    check(got, want, (q, k, v, sinks))


def test_under_compile_dynamic():
    """The public function inside a compiled function (the composite op, decomposed by
    AOTAutograd with the pad and the slice), two lengths on one graph."""
    compiled = torch.compile(lambda q, k, v: flashgen.attention(q, k, v, causal=True) * 2,
                             fullgraph=True, dynamic=True)  # fmt: skip
    for n in (11, 23):
        q, k, v = leaves(2, 2, 1, n, n, 24, 16, seed=n)
        check(compiled(q, k, v), 2 * reference(q, k, v, causal=True), (q, k, v))


class _Latent(torch.nn.Module):
    """DeepSeek-V3's eager attention in small: keys of 16 + 8 dims, values of 16."""

    def forward(self, q, k, v):
        s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        n = s.shape[-1]
        hidden = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        return torch.softmax(s.masked_fill(hidden, float("-inf")), -1) @ v


def test_hand_written_latent_attention_is_replaced():
    model = _Latent()
    from flashgen.compile import patterns

    before = patterns.replaced_total()
    compiled = torch.compile(model, backend=flashgen.backend(fallback="eager"), dynamic=True)
    for n in (9, 19):
        q, k, v = leaves(2, 4, 4, n, n, 24, 16, seed=n)
        check(compiled(q, k, v), model(*(t.double() for t in (q, k, v))), (q, k, v))
    assert patterns.replaced_total() > before
    report = str(flashgen.explain(model, q, k, v))
    assert "replace" in report and "values of head dim 16" in report, report


def test_sdpa_with_latent_values_is_left_to_pytorch():
    """SDPA takes values of another head dim itself: the site is kept, saying why."""

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    q, k, v = leaves(2, 4, 4, 9, 9, 24, 16)
    report = str(flashgen.explain(f, q, k, v))
    assert "another head dim" in report and "replace " not in report, report


def test_what_is_still_refused():
    q, k, v = leaves(1, 2, 2, 5, 5, 16, 8)
    with pytest.raises(ValueError, match="same head_dim"):  # q and k must agree
        flashgen.attention(q, k[..., :8], v)
    wide = torch.randn(1, 2, 5, 300)
    with pytest.raises(ValueError, match="head_dim must be between"):  # padded past the limit
        flashgen.attention(q, k, wide)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("dqk", "dv"), [(192, 128), (64, 128)])
def test_bf16_on_the_gpu(dqk, dv):
    """DeepSeek-V3's dims (keys 128 + 64, values 128) and wider values, bf16 on the GPU, against
    float64 with every gradient (bf16 tolerances)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(2, 8, 300, d, device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_()
        for d in (dqk, dqk, dv)
    )
    got = flashgen.attention(q, k, v, causal=True)
    want = reference(q, k, v, causal=True)
    assert got.shape == want.shape and (got.double() - want).abs().max().item() < 2e-2
    dout = torch.randn(got.shape, device="cuda", generator=g, dtype=torch.bfloat16)
    ours = torch.autograd.grad(got, (q, k, v), dout)
    theirs = torch.autograd.grad(want, (q, k, v), dout.double())
    for a, b in zip(ours, theirs, strict=True):
        assert (a.double() - b).abs().max().item() < 5e-2 * max(1.0, b.abs().max().item())
