"""Split-KV decode kernels reading SDPA's attn_mask (issue 17) on the CPU interpreter, against
float64: HF generate()'s KV-cache masks (causal part, left padding, a static cache's empty
slots), a mask per head, additive masks and HF's finfo.min padding value, the call-signature
cache of the launcher, and the routing of `flashgen.attention(attn_mask=...)`. The `gpu` tests
repeat two of them in bf16.
"""

from __future__ import annotations

import pytest
import torch
from decode_cases import check, hf_cache_mask, inputs, masked_ref

from flashgen.hardware import decode as hw
from flashgen.kernels import decode
from flashgen.kernels.decode import decode_forward
from flashgen.ops import attention

MASK_CASES = [
    # b, hq, hkv, sq, sk, d, config, mask kind
    (2, 8, 2, 1, 301, 64, hw.DecodeConfig(32, 4, 2, 4), "hf"),  # static cache: slots past pos
    (3, 4, 4, 3, 77, 37, None, "hf"),  # MHA, odd head dim, 3 query rows
    (1, 16, 1, 9, 133, 16, hw.DecodeConfig(16, 2, 2, 2), "heads"),  # a mask per head: 3 row blocks
    (2, 6, 2, 5, 150, 128, hw.DecodeConfig(16, 4, 2, 16), "add"),  # additive, empty splits
]


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,d,cfg,kind", MASK_CASES,
    ids=lambda c: c.short() if hasattr(c, "short") else None,
)  # fmt: skip
@pytest.mark.parametrize("causal", [False, True], ids=["nocausal", "causal"])
def test_decode_reads_attn_mask(b, hq, hkv, sq, sk, d, cfg, kind, causal):
    """SDPA's attn_mask read by the decode kernels (what HF generate()'s sites pass): a KV
    cache's causal-and-padding mask broadcast over heads, a mask per head, an additive one;
    a left-padded entry whose rows see no key at all gives zeros, never NaN."""
    from flashgen.kernels.validate import expand_mask

    q, k, v = inputs(b, hq, hkv, sq, sk, d, seed=sk)
    gen = torch.Generator().manual_seed(7)
    if kind == "hf":
        pad = [0, sk, 3][:b]  # entry 1 is padding only: its rows see no key
        mask = hf_cache_mask(b, sq, sk, sk // 2, pad)
    elif kind == "heads":
        mask = torch.rand(b, hq, sq, sk, generator=gen) > 0.3
    else:
        mask = torch.randn(b, 1, sq, sk, generator=gen)
        mask[..., 5:9] = float("-inf")
    offset = 0 if causal else None
    out, lse = decode_forward(
        q, k, v, causal_offset=offset, scale=None, config=cfg, mask=expand_mask(mask, q, k)
    )
    check(out, lse, *masked_ref(q, k, v, mask, offset), 2e-5)


def test_attention_with_attn_mask_runs_decode(monkeypatch):
    """flashgen.attention(attn_mask=...) with a short query runs the decode kernels (HF's
    generate() sites under the compile backend), a longer one the forward kernels."""
    calls = []
    real = decode.decode_forward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mask") is not None)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "decode_forward", spy)
    for sq in (1, 17):
        q, k, v = inputs(2, 4, 2, sq, 50, 32, seed=sq)
        mask = hf_cache_mask(2, sq, 50, 50 - sq, [0, 4])
        out = attention(q, k, v, attn_mask=mask)
        want, _ = masked_ref(q, k, v, mask)
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
    assert calls == [True]


@pytest.mark.gpu
def test_decode_attn_mask_gpu_bf16():
    q, k, v = (t.cuda() for t in inputs(2, 32, 8, 1, 4099, 128, torch.bfloat16))
    mask = hf_cache_mask(2, 1, 4099, 3000, [0, 17])
    out = attention(q, k, v, attn_mask=mask.cuda())
    want, _ = masked_ref(q.cpu(), k.cpu(), v.cpu(), mask)
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)


def test_repeated_signature_skips_prepare_and_reads_new_values(monkeypatch):
    """A static cache's decoding steps repeat one call signature: the second call takes the
    cached `_Call` (no `_prepare`), yet computes from its own tensors (new values, a new mask
    at a new address); an un-expanded [B, 1, 1, Sk] mask is read with stride 0 over heads."""
    prepared = []
    real = decode._prepare

    def spy(*args, **kwargs):
        prepared.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(decode, "_prepare", spy)
    cfg = hw.DecodeConfig(16, 4, 2, 4)
    for seed in (11, 12):
        q, k, v = inputs(2, 4, 2, 1, 90, 32, seed=seed)
        mask = hf_cache_mask(2, 1, 90, 60 + seed, [0, seed - 8])
        out, lse = decode_forward(q, k, v, causal_offset=None, scale=None, config=cfg, mask=mask)
        check(out, lse, *masked_ref(q, k, v, mask), 2e-5)
    assert len(prepared) == 1


def test_decode_mask_checked_once_per_signature():
    """The raw mask is checked (`expand_mask`): a mask that does not broadcast is refused."""
    q, k, v = inputs(1, 4, 2, 1, 40, 32)
    with pytest.raises(ValueError, match="does not broadcast"):
        decode_forward(q, k, v, causal_offset=None, scale=None, mask=torch.ones(1, 3, 1, 40) > 0)


def _finite_min_mask(b, sq, sk, dtype):
    """HF-style additive mask [b, 1, sq, sk]: 0 / finfo(dtype).min at random, some -inf; batch 1
    carries finfo.min on every key (rows PyTorch averages over), -inf among them on row 0 (those
    keys stay hidden), and batch 0's row 1 (if any) is -inf everywhere (zeros)."""
    gen = torch.Generator().manual_seed(5)
    low = torch.finfo(dtype).min
    m = torch.zeros(b, 1, sq, sk).masked_fill(torch.rand(b, 1, sq, sk, generator=gen) > 0.6, low)
    m = m.masked_fill(torch.rand(b, 1, sq, sk, generator=gen) > 0.9, float("-inf"))
    m[1] = low
    m[1, :, 0, 1::4] = float("-inf")
    if sq > 1:
        m[0, :, 1] = float("-inf")
    return m.to(dtype)


@pytest.mark.parametrize(
    "sq,cfg", [(1, hw.DecodeConfig(16, 4, 2, 4)), (3, hw.DecodeConfig(16, 4, 2, 1)),
               (3, hw.DecodeConfig(16, 4, 2, 7))],
    ids=["splits4", "final", "splits7"],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32mask", "bf16mask"])
@pytest.mark.parametrize("causal", [False, True], ids=["nocausal", "causal"])
def test_decode_finite_min_bias_rows_average(sq, cfg, dtype, causal):
    """HF's finfo.min additive mask: a row whose visible keys all carry it averages their values
    as PyTorch's softmax does (the kernel used to overflow finfo.min * log2(e) to -inf and
    return zeros); with several splits of unequal key counts (150 keys in splits of 48) the
    merge weighs them by count, so the result is the mean over all the row's keys. Such rows get
    lse = +inf (as the forward kernel gives them); an all -inf row gives zeros."""
    b, sk = 2, 150
    q, k, v = inputs(b, 4, 2, sq, sk, 32, seed=3)
    mask = _finite_min_mask(b, sq, sk, dtype)
    offset = 0 if causal else None
    out, lse = decode_forward(q, k, v, causal_offset=offset, scale=None, config=cfg, mask=mask)
    want, want_lse = masked_ref(q, k, v, mask, offset)
    assert not out.isnan().any() and not lse.isnan().any()
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    assert out[1].abs().sum() > 0  # batch 1's rows are means, not zeros
    hidden = want_lse < -1e30  # rows whose scores all sit near finfo.min
    assert hidden[1].all()
    assert torch.isinf(lse[hidden]).all() and (lse[hidden] > 0).all()
    torch.testing.assert_close(lse.double()[~hidden], want_lse[~hidden], atol=2e-5, rtol=1e-4)


@pytest.mark.gpu
def test_decode_finite_min_bias_gpu_bf16():
    """The finfo.min rows on the GPU (bf16 inputs, a float32 HF mask, 8 splits of unequal key
    counts): means where PyTorch averages, zeros where every key is -inf, no NaN."""
    q, k, v = inputs(2, 32, 8, 1, 1030, 128, torch.bfloat16, seed=9)
    mask = _finite_min_mask(2, 1, 1030, torch.float32)
    cfg = hw.DecodeConfig(64, 4, 3, 8)
    out, lse = decode_forward(
        q.cuda(), k.cuda(), v.cuda(), causal_offset=None, scale=None, config=cfg, mask=mask.cuda()
    )
    want, _ = masked_ref(q, k, v, mask)
    assert not out.isnan().any()
    torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
    assert torch.isinf(lse[1].cpu()).all()
