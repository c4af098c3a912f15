"""The pattern pass proves a KV cache's mask bottom-right aligned (issue 17).

A mask that compares query positions arange(Sq) + (Sk - Sq) with key positions (what HF builds
from its cache length) is causal counted from the bottom-right diagonal for every (Sq, Sk) the
graph accepts: the site is replaced by flashgen's op with causal_align="bottom_right", under
dynamic shapes and static ones, for SDPA's attn_mask and hand-written masked_fill; so is
`tril(Sk - Sq)`, the same mask by its diagonal, and a causal buffer's rows sliced from Sk - Sq
(the slice start guarded non-negative). Offsets that
are not Sk - Sq, and a top-left mask with lengths that may differ, stay with Inductor.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import flashgen


def ref(q, k, v, offset):
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(k.shape[2])[None, :]
    return torch.softmax(s.masked_fill(j > i + offset, float("-inf")), -1) @ v


def cache_mask(q, k, extra=0):
    sq, sk = q.shape[-2], k.shape[-2]
    q_pos = torch.arange(sq, device=q.device) + (sk - sq) + extra
    kv_pos = torch.arange(sk, device=q.device)
    return kv_pos[None, :] <= q_pos[:, None]


def sdpa_site(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=cache_mask(q, k))


def handwritten_site(q, k, v):
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~cache_mask(q, k), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def tril_site(q, k, v):  # the cache's causal mask as tril(Sk - Sq), filled in place
    sq, sk = q.shape[-2], k.shape[-2]
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s.masked_fill_(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class BufferSite(torch.nn.Module):
    """nanoGPT's causal buffer sliced for a KV cache: the last Sq of its first Sk rows."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(64, 64, dtype=torch.bool)))

    def forward(self, q, k, v):
        sq, sk = q.shape[-2], k.shape[-2]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        s = s.masked_fill(~self.bias[sk - sq : sk, :sk], float("-inf"))
        return torch.softmax(s, dim=-1) @ v


buffer_site = BufferSite()
buffer_site.__name__ = "buffer_site"


def shifted_site(q, k, v):  # one key more than the bottom-right diagonal: not causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=cache_mask(q, k, extra=1))


def topleft_site(q, k, v):  # a top-left tril with lengths that differ: not proven
    sq, sk = q.shape[-2], k.shape[-2]
    mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _inputs(sq, sk, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, s, 16, generator=gen) for s in (sq, sk, sk)]


@pytest.mark.parametrize(
    "fn", [sdpa_site, handwritten_site, tril_site, buffer_site], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
def test_cache_mask_replaced_bottom_right(fn, dynamic):
    report = flashgen.explain(fn, *_inputs(3, 11, 0))
    assert report.replaced == 1, str(report)
    assert report.sites[0].align == "bottom_right" and "bottom-right" in str(report)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="flashgen", dynamic=dynamic)
    for sq, sk in ((3, 11), (1, 20), (5, 9)):
        q, k, v = _inputs(sq, sk, sk)
        torch.testing.assert_close(
            compiled(q, k, v).double(), ref(q, k, v, sk - sq), atol=2e-5, rtol=1e-4
        )


@pytest.mark.parametrize("fn", [shifted_site, topleft_site], ids=lambda f: f.__name__)
def test_other_masks_are_read_as_tensors(fn):
    """Not proven causal: the site runs flashgen's kernel with the mask as a tensor (issue 16),
    not as a causal mask, and matches eager."""
    report = flashgen.explain(fn, *_inputs(3, 11, 0))
    (site,) = report.sites
    assert site.replaced and site.mask == "bool" and site.causal is False, str(report)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="flashgen")
    q, k, v = _inputs(3, 11, 1)
    torch.testing.assert_close(compiled(q, k, v), fn(q, k, v), atol=2e-5, rtol=1e-4)
