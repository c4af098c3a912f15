"""ALiBi in the split-KV decode kernels (issue 16: a KV cache's decode step of BLOOM / MPT-style
models), on the CPU interpreter against float64: the output and the lse of slope * (j - i) added
to the scaled scores (the lse the backward reads), with one split and several, GQA, an odd head
dim, slopes per batch entry (some negative), top-left, bottom-right and no causal offset, HF's
boolean KV-cache mask beside them, both K/V builds; the routing of `flashgen.attention`
(short queries with ALiBi to these kernels, the gradients from their lse; an additive mask or
more queries than keys under bottom-right causal to the forward kernels). Bf16 on the GPU."""

from __future__ import annotations

import pytest
import torch
from decode_cases import hf_cache_mask, inputs

from flashgen.hardware import decode as hw
from flashgen.kernels import decode
from flashgen.kernels.alibi import bias_ref, check_slopes, standard_slopes
from flashgen.kernels.decode import decode_forward
from flashgen.kernels.reference import rows_ref, scores_ref
from flashgen.ops import attention


def _slopes(b, h, per_batch):
    slopes = standard_slopes(h)
    if per_batch:  # another set per batch entry (negative from the third entry on)
        slopes = torch.stack([slopes * (1.0 - 0.7 * i) for i in range(b)])
    return slopes


def _ref(q, k, v, slopes, offset=None, mask=None):
    """float64 (out, lse) of ALiBi attention, query i seeing keys j <= i + offset (all when
    None) and the boolean mask; a row that sees nothing gives zeros and lse +inf."""
    s = scores_ref(q, k) + bias_ref(slopes, q.shape[2], k.shape[2])
    if offset is not None:
        i = torch.arange(q.shape[2])[:, None]
        j = torch.arange(k.shape[2])[None, :]
        s = s.masked_fill(j > i + offset, float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return rows_ref(s, v.double())


def _check(out, lse, want, want_lse, tol=2e-5):
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=tol, rtol=tol)
    # lse holds slope * (ref - i) (up to slope * Sk): float32's spacing there, relatively
    torch.testing.assert_close(lse.double(), want_lse, atol=tol, rtol=1e-6)


CASES = [
    # b, hq, hkv, sq, sk, d, causal offset ("br": Sk - Sq, "top": 0, None), config, per batch
    (2, 8, 2, 1, 301, 64, "br", hw.DecodeConfig(32, 4, 2, 4), False),  # 4 splits, a step
    (2, 8, 2, 3, 301, 64, None, hw.DecodeConfig(32, 4, 2, 4), True),  # no causal mask
    (3, 4, 4, 3, 77, 37, "top", None, True),  # MHA, odd head dim, top-left, negative slopes
    (1, 16, 1, 9, 133, 16, "br", hw.DecodeConfig(16, 2, 2, 2), True),  # 9-row draft, 2 row blocks
    (2, 8, 2, 1, 301, 64, "br", hw.DecodeConfig(32, 4, 2, 1), True),  # one split (FINAL)
]


def _offset(name, sq, sk):
    return {"br": sk - sq, "top": 0, None: None}[name]


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,off,cfg,per_batch", CASES,
    ids=lambda c: c.short() if hasattr(c, "short") else None,
)  # fmt: skip
def test_decode_alibi_matches_float64(b, hq, hkv, sq, sk, d, off, cfg, per_batch, tma, monkeypatch):
    """Out and the lse of the fully biased scores, row by row: the kernel counts ALiBi from
    each row's last visible key and adds the rest to the lse (split partials and the merge
    included), which must give the logsumexp of slope * (j - i) exactly as float64 does."""
    if tma == "1" and (d * 4) % 16:
        pytest.skip("TMA needs 16-byte strides")
    monkeypatch.setenv("FLASHGEN_DECODE_TMA", tma)
    q, k, v = inputs(b, hq, hkv, sq, sk, d, seed=sk + sq)
    slopes = _slopes(b, hq, per_batch)
    offset = _offset(off, sq, sk)
    out, lse = decode_forward(
        q, k, v, causal_offset=offset, scale=None, config=cfg, alibi=check_slopes(slopes, q)
    )
    _check(out, lse, *_ref(q, k, v, slopes, offset))


@pytest.mark.parametrize("off", [None, "br"])
def test_decode_alibi_beside_a_boolean_kv_cache_mask(off):
    """HF's generate() mask (left padding, one entry padding only: its rows see no key, zeros
    and lse +inf, never NaN) with the slopes, as MPT's padded batch hands them over."""
    b, hq, hkv, sq, sk, d = 3, 4, 2, 3, 77, 32
    q, k, v = inputs(b, hq, hkv, sq, sk, d, seed=11)
    mask = hf_cache_mask(b, sq, sk, sk - sq, [0, sk, 3])
    slopes = _slopes(b, hq, True)
    offset = _offset(off, sq, sk)
    out, lse = decode_forward(
        q, k, v, causal_offset=offset, scale=None, config=hw.DecodeConfig(16, 2, 2, 3),
        mask=mask, alibi=check_slopes(slopes, q),
    )  # fmt: skip
    want, want_lse = _ref(q, k, v, slopes, offset, mask)
    assert torch.isinf(lse[1]).all() and (out[1] == 0).all()
    rows = torch.tensor([0, 2])
    _check(out[rows], lse[rows], want[rows], want_lse[rows])


def test_decode_refuses_alibi_it_cannot_run():
    """An additive mask, or a negative causal offset (rows that see no key, which the forward
    kernels drop before counting ALiBi's i): a ValueError, not a wrong lse."""
    q, k, v = inputs(1, 2, 2, 2, 40, 16)
    slopes = check_slopes(standard_slopes(2), q)
    with pytest.raises(ValueError, match="takes_alibi"):
        decode_forward(q, k, v, causal_offset=None, scale=None, mask=torch.zeros(1, 1, 2, 40),
                       alibi=slopes)  # fmt: skip
    with pytest.raises(ValueError, match="takes_alibi"):
        decode_forward(q, k, v, causal_offset=-1, scale=None, alibi=slopes)


def _spy(monkeypatch):
    calls = []
    real = decode.decode_forward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("alibi") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "decode_forward", spy)
    return calls


@pytest.mark.parametrize(
    "sq,sk,kw",
    [
        (1, 45, {"causal": True, "causal_align": "bottom_right"}),  # a KV cache's decode step
        (5, 45, {"causal": True, "causal_align": "bottom_right"}),  # a draft of 5
        (4, 45, {"causal": True}),  # top-left
        (3, 45, {}),
    ],
    ids=["step", "draft", "topleft", "full"],
)
def test_attention_runs_short_alibi_queries_on_decode(sq, sk, kw, monkeypatch):
    """flashgen.attention(alibi_slopes=) with a short query runs the decode kernels, and its
    backward, from their lse, gives float64's gradients."""
    calls = _spy(monkeypatch)
    q, k, v = (t.requires_grad_() for t in inputs(2, 4, 2, sq, sk, 32, seed=sq))
    slopes = _slopes(2, 4, True)
    out = attention(q, k, v, alibi_slopes=slopes, **kw)
    assert calls == [True]
    offset = None
    if kw.get("causal"):
        offset = sk - sq if kw.get("causal_align") == "bottom_right" else 0
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = _ref(*leaves, slopes, offset)[0]
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), g.to(out.dtype))
    exp = torch.autograd.grad(want, leaves, g)
    for name, a, e in zip(("dq", "dk", "dv"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), e, atol=5e-5, rtol=1e-4, msg=name)


def test_attention_keeps_the_forward_kernels_where_decode_cannot(monkeypatch, caplog):
    """An additive mask beside the slopes, or more queries than keys under bottom-right causal,
    runs the forward kernels (logged once), still right; FLASHGEN_DECODE=0 too, unlogged."""
    from flashgen.runtime import primitives

    primitives._log_no_decode.cache_clear()
    calls = _spy(monkeypatch)
    q, k, v = inputs(1, 4, 2, 3, 37, 16, seed=4)
    slopes = standard_slopes(4)
    bias = torch.randn(1, 1, 3, 37, generator=torch.Generator().manual_seed(2))
    with caplog.at_level("INFO", logger="flashgen"):
        out = attention(q, k, v, alibi_slopes=slopes, attn_mask=bias)
    s = scores_ref(q, k) + bias_ref(slopes, 3, 37) + bias.double()
    torch.testing.assert_close(out.double(), rows_ref(s, v.double())[0], atol=2e-5, rtol=1e-4)
    assert "the decode kernels take ALiBi alone or with a boolean mask" in caplog.text
    q2, k2, v2 = inputs(1, 4, 2, 6, 4, 16, seed=5)  # 6 queries, 4 keys: rows 0, 1 see none
    out = attention(q2, k2, v2, alibi_slopes=slopes, causal=True, causal_align="bottom_right")
    want = _ref(q2, k2, v2, slopes, -2)[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    monkeypatch.setenv("FLASHGEN_DECODE", "0")
    attention(q, k, v, alibi_slopes=slopes)
    assert calls == []


@pytest.mark.gpu
@pytest.mark.parametrize("hq,hkv,d,sq", [(32, 8, 128, 1), (16, 16, 64, 4)])
def test_decode_alibi_gpu_bf16(hq, hkv, d, sq):
    q, k, v = (t.cuda() for t in inputs(2, hq, hkv, sq, 4099, d, torch.bfloat16))
    slopes = _slopes(2, hq, True)
    out = attention(q, k, v, alibi_slopes=slopes.cuda(), causal=True, causal_align="bottom_right")
    want, _ = _ref(q.cpu(), k.cpu(), v.cpu(), slopes, 4099 - sq)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
