"""The gradient of an additive attn_mask that requires grad (issue 16: T5's relative position
bias, learned biases), on the CPU interpreter against float64 autograd.

`flashgen.attention(attn_mask=bias)` with `bias.requires_grad`: dq, dk, dv and dbias against
the float64 reference's autograd, for a full [B, Hq, Sq, Sk] bias and for broadcast shapes
(T5's [1, Hq, Sq, Sk], a per-key [B, 1, 1, Sk], a 2-D [Sq, Sk]: the gradient summed over the
broadcast dims), with causal, a window, a softcap, GQA and odd lengths; -inf entries (hidden
keys) get zero gradient and never NaN; a bias that alone requires grad. Small tiles so the
walk has skipped, masked and whole blocks. Bf16 numerics need the GPU (the `gpu` test).
"""

from __future__ import annotations

import pytest
import torch

from flashgen.core.config import TileConfig
from flashgen.kernels import bias_grad
from flashgen.kernels.reference import hidden_ref, rows_ref, scores_ref
from flashgen.ops import attention

TILES = TileConfig(16, 16, 4, 1)


def ref(q, k, v, bias, *, causal=False, window=None, softcap=None):
    """float64 attention, scores + bias (-inf hides a key), rows that see nothing give 0."""
    s = scores_ref(q, k, softcap=softcap) + bias
    hide = hidden_ref(q.shape[2], k.shape[2], causal=causal, window=window)
    return rows_ref(s.masked_fill(hide, float("-inf")), v)[0]


CASES = [
    # name, b, hq, hkv, sq, sk, bias shape (None: full), causal, window, softcap
    ("full-causal-gqa", 2, 4, 2, 37, 37, None, True, None, None),
    ("t5-shared-batch", 2, 2, 2, 29, 45, (1, 2, 29, 45), False, None, None),
    ("per-key", 2, 2, 1, 33, 40, (2, 1, 1, 40), False, None, None),
    ("2d-window-softcap", 1, 2, 2, 41, 41, (41, 41), True, (9, 0), 15.0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_bias_gradient_matches_float64(case, monkeypatch):
    _, b, hq, hkv, sq, sk, shape, causal, window, softcap = case
    monkeypatch.setattr(bias_grad, "plan_config", lambda config, spec, *a: (TILES, True))
    gen = torch.Generator().manual_seed(sq)
    q, k, v = (torch.randn(b, h, n, 32, generator=gen) for h, n in ((hq, sq), (hkv, sk), (hkv, sk)))
    bias = torch.randn(shape or (b, hq, sq, sk), generator=gen)
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    kw = {"causal": causal, "softcap": softcap}
    if window is not None:
        kw["window"] = window
    out = attention(q, k, v, attn_mask=bias, **kw)
    leaves64 = [t.detach().double().requires_grad_() for t in leaves]
    want = ref(*leaves64, causal=causal, window=window, softcap=softcap)
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, do)
    exp = torch.autograd.grad(want, leaves64, do.double())
    for name, g, e in zip(("dq", "dk", "dv", "dbias"), got, exp, strict=True):
        assert g.shape == e.shape and g.dtype == torch.float32, name
        torch.testing.assert_close(g.double(), e, atol=5e-5, rtol=1e-4, msg=name)


def test_hidden_keys_get_zero_gradient_and_bias_alone_requires_grad(monkeypatch):
    """-inf entries (a padding-style bias, one row hiding every key) give zero gradient, no
    NaN; q, k, v without grad: only the bias's gradient is asked for."""
    monkeypatch.setattr(bias_grad, "plan_config", lambda config, spec, *a: (TILES, True))
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 21, 16, generator=gen) for _ in range(3))
    bias = torch.randn(1, 2, 21, 21, generator=gen)
    bias[..., 15:] = float("-inf")
    bias[0, 1, 4, :] = float("-inf")
    bias.requires_grad_()
    out = attention(q, k, v, attn_mask=bias)
    (dbias,) = torch.autograd.grad(out, bias, torch.ones_like(out))
    assert not torch.isnan(dbias).any() and not torch.isnan(out).any()
    assert (dbias[..., 15:] == 0).all() and (dbias[0, 1, 4] == 0).all()
    b64 = bias.detach().double().requires_grad_()
    want = ref(q.double(), k.double(), v.double(), b64)
    (e,) = torch.autograd.grad(want, b64, torch.ones_like(want))
    # float64 autograd gives NaN for the row that hides every key (its output is constant 0)
    torch.testing.assert_close(dbias.double(), e.nan_to_num(0.0), atol=5e-5, rtol=1e-4)


def test_reduce_to_sums_broadcast_dims():
    full = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
    for shape in ((2, 3, 4, 5), (1, 3, 4, 5), (2, 1, 1, 5), (4, 5), (5,), (1, 1, 4, 1)):
        bias = torch.zeros(shape, dtype=torch.float16)
        got = bias_grad.reduce_to(full, bias)
        want = full.sum_to_size((1,) * (4 - len(shape)) + shape).reshape(shape)
        assert got.dtype == torch.float16 and got.shape == bias.shape
        torch.testing.assert_close(got, want.half())


def test_opcheck_attention_bwd_bias():
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 19, 16, generator=gen) for _ in range(3))
    bias = torch.randn(2, 19, 19, generator=gen)
    out, lse = torch.ops.flashgen.attention_fwd(q, k, v, True, 0.25, attn_mask=bias)
    do = torch.randn_like(out)
    args = (do, q, k, v, out, lse, bias, True, 0.25)
    torch.library.opcheck(torch.ops.flashgen.attention_bwd_bias.default, args)


@pytest.mark.gpu
def test_bias_gradient_bf16_on_gpu():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1003, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    bias = torch.randn(1, 8, 1003, 1003, device="cuda", dtype=torch.bfloat16)
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    out = attention(q, k, v, attn_mask=bias, causal=True)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, leaves, do)
    leaves64 = [t.detach().double().cpu().requires_grad_() for t in leaves]  # CPU leaves
    want = ref(*leaves64, causal=True)
    exp = torch.autograd.grad(want, leaves64, do.double().cpu())
    assert (out.double().cpu() - want).abs().max() <= 2e-2 * want.abs().max()
    for g, e in zip(got, exp, strict=True):
        assert (g.double().cpu() - e).abs().max() <= 2e-2 * e.abs().max()
