"""ALiBi written by hand, compiled with backend="flashgen" (issue 16): the pattern pass proves
the additive bias is slope * (j - i) up to per-row constants (`flashgen.compile.patterns.alibi`)
and hands the op the slopes (`alibi_slopes=`) instead of an N x N tensor. Spellings: BLOOM's
slopes * j, slopes * (j - i), -slopes * (i - j), causal by a tril buffer, SDPA's attn_mask,
dynamic lengths; forward and gradients equal eager's, and the site is
replaced with ALiBi. Biases that are not ALiBi (or slopes that require grad) stay mask tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from model_checks import inputs_match_eager, slopes_seen

import flashgen
from flashgen.compile.backend import backend
from flashgen.kernels.alibi import standard_slopes

B, H, D = 2, 4, 16


class Alibi(torch.nn.Module):
    """Hand-written attention with an ALiBi bias built in forward() from a slopes buffer."""

    def __init__(self, spelling: str, causal: bool = False, sdpa: bool = False):
        super().__init__()
        self.spelling, self.causal, self.sdpa = spelling, causal, sdpa
        self.register_buffer("slopes", standard_slopes(H))
        self.register_buffer("tril", torch.tril(torch.ones(512, 512, dtype=torch.bool)))

    def bias(self, t: int, device) -> torch.Tensor:
        pos = torch.arange(t, device=device)
        if self.spelling == "bloom":  # BLOOM: slope * key position, the same on every row
            return self.slopes.view(1, H, 1, 1) * pos.view(1, 1, 1, t).float()
        if self.spelling == "j-i":
            return self.slopes[:, None, None] * (pos[None, :] - pos[:, None])
        if self.spelling == "sub-i-j":  # subtracted from the scores below
            return (pos[:, None] - pos[None, :]) / 2 * (2 * self.slopes[:, None, None])
        return -self.slopes.unsqueeze(-1).unsqueeze(-1) * (pos[:, None] - pos[None, :])

    def forward(self, q, k, v):
        t = q.shape[-2]
        bias = self.bias(t, q.device)
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=self.causal)
        s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
        s = s - bias if self.spelling == "sub-i-j" else s + bias
        if self.causal:
            s = s.masked_fill(~self.tril[:t, :t], float("-inf"))
        return s.softmax(-1) @ v


def _qkv(t, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, t, D, generator=gen).to(device).requires_grad_() for _ in range(3)]


def _site(model, *args):
    report = flashgen.explain(model, *args)
    assert report.found == 1, str(report)
    return report.sites[0]


def _matches_eager(model, compiled, t, seed=0, device="cpu"):
    inputs_match_eager(model, compiled, *_qkv(t, seed, device))


SPELLINGS = [
    ("bloom", False, False),
    ("j-i", False, False),
    ("neg-i-j", True, False),
    ("bloom", True, False),
    ("sub-i-j", True, False),
    ("j-i", False, True),
    ("neg-i-j", False, True),
]


@pytest.mark.parametrize("spelling,causal,sdpa", SPELLINGS, ids=lambda x: str(x))
def test_alibi_site_replaced_and_matches_eager(spelling, causal, sdpa):
    model = Alibi(spelling, causal, sdpa)
    site = _site(model, *_qkv(37))
    assert site.replaced and site.alibi and not site.mask, site
    assert site.causal is causal
    torch._dynamo.reset()
    _matches_eager(model, torch.compile(model, backend=backend(fallback="aot_eager")), 37)


def test_with_the_flashgen_backend_and_dynamic_lengths(monkeypatch):
    """backend="flashgen" (Inductor around the op), dynamic=True: the proof holds for every
    length, so a new length reuses the graph and still matches eager; the kernels got slopes."""
    seen = slopes_seen(monkeypatch)
    model = Alibi("j-i", causal=True)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="flashgen", dynamic=True)
    for t in (23, 41):
        _matches_eager(model, compiled, t, seed=t)
    assert seen and all(tuple(s.shape) == (H,) for s in seen)


class NotAlibi(Alibi):
    """A bias that looks like ALiBi and is not: |j - i| (a symmetric distance), a slope per row,
    a learned slope, one rounded to bf16, heads permuted after the slopes were applied (the
    shape is unchanged), the head axis moved onto the rows by an index (at a length equal to
    the head count); each stays an additive mask tensor (exact), never the kernels' ALiBi."""

    def __init__(self, kind: str):
        super().__init__("j-i")
        self.kind = kind
        if kind == "learned":
            self.learned = torch.nn.Parameter(standard_slopes(H))

    def bias(self, t, device):
        pos = torch.arange(t, device=device)
        rel = pos[None, :] - pos[:, None]
        if self.kind == "abs":
            return -self.slopes[:, None, None] * rel.abs()
        if self.kind == "per_row":
            return (pos[:, None] * 0.01) * rel
        if self.kind == "bf16":  # rounded before the add: the kernels must add what eager adds
            return (self.slopes[:, None, None] * rel).to(torch.bfloat16)
        if self.kind == "permuted":  # head h gets slope perm[h], not the slopes node's
            return (self.slopes[:, None, None] * rel)[torch.tensor([1, 0, 3, 2], device=device)]
        if self.kind == "heads_as_rows":  # [H, 1, t][:, 0] is [H, t]: slope h on row h
            return (self.slopes[:, None, None] * pos)[:, 0]
        return self.learned[:, None, None] * rel


@pytest.mark.parametrize("kind", ["abs", "per_row", "learned", "bf16", "permuted", "heads_as_rows"])
def test_biases_that_are_not_alibi_stay_mask_tensors(kind):
    model = NotAlibi(kind)
    t = H if kind == "heads_as_rows" else 21
    site = _site(model, *_qkv(t))
    assert not site.alibi and site.mask == "add", site
    torch._dynamo.reset()
    _matches_eager(model, torch.compile(model, backend=backend(fallback="aot_eager")), t)


@pytest.mark.gpu
@pytest.mark.parametrize("spelling,causal", [("bloom", True), ("j-i", False)])
def test_on_gpu_with_the_flashgen_backend(spelling, causal):
    """The same numerics on the GPU (float32: the proven bias is float32), flashgen's backend."""
    model = Alibi(spelling, causal).cuda()
    site = _site(model, *_qkv(301, device="cuda"))
    assert site.replaced and site.alibi, site
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend())  # (the entry point needs an install)
    _matches_eager(model, compiled, 301, device="cuda")
