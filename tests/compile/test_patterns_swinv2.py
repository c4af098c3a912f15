"""HF Swin v2's attention: scores multiplied by a tensor of one value per head (its learned
logit scale), and a mask added to the scores viewed per window.

Swin v2's cosine attention is `normalize(q) @ normalize(k)^T * exp(clamp(logit_scale))` with
`logit_scale` a parameter of shape [H, 1, 1], then a relative bias and the shifted windows'
mask. The kernels take one scale for all heads, but such a factor multiplies every score of
a head alike, so the rewrite hands the op q times it: the same scores, and the factor's
gradient flows through that product. Refused where it would not be the same: a mask or bias
applied before the factor (it would be scaled too), a factor after a softcap's tanh, and a
factor that varies along the batch, the queries or the keys (not one per head).

Its shifted windows' mask is added to the scores viewed as [B // W, W, H, N, N] (one mask per
window), then viewed back (`window_views`): the pass reads it on the 4-D scores, the mask
expanded and flattened as the scores were, and leaves the graph as it was where the site is
not replaced.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

import flashgen
from flashgen.compile.backend import backend

B, H, T, D = 2, 3, 9, 16


def _qkv(dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    return [torch.randn(B, H, T, D, generator=g, dtype=dtype, requires_grad=True) for _ in "qkv"]


def _cosine(q, k, v, logit_scale, bias=None, divide=False):
    """Swin v2's spelling: normalised q and k, the per-head factor, then the bias."""
    s = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
    factor = torch.clamp(logit_scale, max=math.log(100.0)).exp()
    s = s / factor if divide else s * factor
    if bias is not None:
        s = s + bias
    return torch.softmax(s, dim=-1) @ v


def _compiled(fn, *args, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend(fallback="aot_eager"))(*args, **kwargs)


def _grads(out, tensors):
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(out.dtype)
    return torch.autograd.grad((out * w).sum(), tensors)


@pytest.mark.parametrize("shape", [(H, 1, 1), (1, H, 1, 1), (1, 1, 1)])
@pytest.mark.parametrize("divide", [False, True])
def test_a_per_head_factor_goes_into_q_with_its_gradient(shape, divide):
    """Replaced at scale 1; outputs and the gradients of q, k, v and the learned factor equal
    float64 eager's to float32's order."""
    q, k, v = _qkv()
    scale = (torch.rand(shape, generator=torch.Generator().manual_seed(6)) * 3).requires_grad_()
    bias = torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(7))
    report = flashgen.explain(_cosine, q, k, v, scale, bias, divide)
    assert [s.replaced for s in report.sites] == [True], str(report)
    assert report.sites[0].scale == pytest.approx(1.0) and report.sites[0].mask == "add"
    assert report.sites[0].head_scale and "1 x per head" in str(report)
    got = _compiled(_cosine, q, k, v, scale, bias, divide)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v, scale)]
    ref = _cosine(*ref_in[:3], ref_in[3], bias.double(), divide)
    torch.testing.assert_close(got.double(), ref, atol=2e-6, rtol=1e-5)
    names = ("q", "k", "v", "factor")
    for name, g, r in zip(names, _grads(got, [q, k, v, scale]), _grads(ref, ref_in), strict=True):
        assert r.abs().max() > 1e-3, name  # (the factor's gradient is not zero)
        torch.testing.assert_close(g.double(), r, atol=2e-5, rtol=1e-4, msg=name)


def _mask_first(q, k, v, logit_scale, bias):
    s = (q @ k.transpose(-2, -1) + bias) * logit_scale.exp()
    return torch.softmax(s, dim=-1) @ v


def _after_softcap(q, k, v, logit_scale):
    s = 30.0 * torch.tanh(q @ k.transpose(-2, -1) / 30.0) * logit_scale
    return torch.softmax(s, dim=-1) @ v


def _inside_softcap(q, k, v, logit_scale):
    s = 30.0 * torch.tanh(q @ k.transpose(-2, -1) * logit_scale / 30.0)
    return torch.softmax(s, dim=-1) @ v


def _per_row(q, k, v, factor):
    return torch.softmax(q @ k.transpose(-2, -1) * factor, dim=-1) @ v


def test_a_factor_after_a_mask_or_a_softcap_is_refused():
    q, k, v = _qkv()
    scale = torch.rand(H, 1, 1, generator=torch.Generator().manual_seed(8))
    bias = torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(9))
    site = flashgen.explain(_mask_first, q, k, v, scale, bias).sites[0]
    assert not site.replaced and "before a per-head factor" in site.reason
    torch.testing.assert_close(
        _compiled(_mask_first, q, k, v, scale, bias), _mask_first(q, k, v, scale, bias)
    )
    site = flashgen.explain(_after_softcap, q, k, v, scale).sites[0]
    assert not site.replaced and "after the softcap" in site.reason
    # inside the tanh it is the scale the kernels apply before the softcap
    report = flashgen.explain(_inside_softcap, q, k, v, scale)
    assert [s.replaced for s in report.sites] == [True], str(report)
    assert report.sites[0].softcap == pytest.approx(30.0)
    got = _compiled(_inside_softcap, q, k, v, scale)
    torch.testing.assert_close(got, _inside_softcap(q, k, v, scale), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("shape", [(B, H, 1, 1), (H, T, 1), (1, H, 1, T), (H,)])
def test_a_factor_not_one_per_head_is_not_folded(shape):
    """Varying along the batch, the queries or the keys (or a [H] factor, which broadcasts
    along the keys): not one value per head, never folded into q."""
    q, k, v = _qkv()
    if shape == (H,):
        q, k, v = (t[..., :H, :] for t in (q, k, v))  # (H keys, so that it broadcasts)
    factor = torch.rand(shape, generator=torch.Generator().manual_seed(10)) + 0.5
    report = flashgen.explain(_per_row, q, k, v, factor)
    assert not any(s.replaced for s in report.sites), str(report)
    torch.testing.assert_close(_compiled(_per_row, q, k, v, factor), _per_row(q, k, v, factor))


def _upcast(q, k, v, logit_scale):
    """A float32 factor on float16 scores: float32 scores, cast back for the value product."""
    s = q @ k.transpose(-2, -1) * logit_scale
    return torch.softmax(s, dim=-1).to(v.dtype) @ v


def test_a_factor_of_another_dtype_is_refused():
    q, k, v = _qkv(torch.float16)
    scale = torch.rand(H, 1, 1, generator=torch.Generator().manual_seed(11))
    site = flashgen.explain(_upcast, q, k, v, scale).sites[0]
    assert not site.replaced and "per-head factor of the scores of dtype" in site.reason


A, W, N = 2, 3, 7  # batch, windows per image, patches per window


def _windowed(q, k, v, window_mask, key_bias=None):
    """Swin's spelling: q, k, v [A * W, H, N, D]; a mask per window [W, N, N] (and a bias per
    image and key [A, 1, 1, 1, N]) added to the scores viewed as [A, W, H, N, N]."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.view(A, W, H, N, N) + window_mask.unsqueeze(1).unsqueeze(0)
    if key_bias is not None:
        s = s + key_bias
    s = s.view(-1, H, N, N)
    return torch.softmax(s, dim=-1) @ v


def _window_inputs():
    g = torch.Generator().manual_seed(14)
    q, k, v = (torch.randn(A * W, H, N, D, generator=g, requires_grad=True) for _ in "qkv")
    window_mask = torch.randn(W, N, N, generator=g).requires_grad_()
    key_bias = torch.randn(A, 1, 1, 1, N, generator=g) * 2
    return q, k, v, window_mask, key_bias


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_mask_added_per_window_is_read_with_its_gradient(with_bias):
    """Replaced with one additive mask (the two summed); outputs and the gradients of q, k, v
    and the learned window mask equal eager's."""
    q, k, v, window_mask, key_bias = _window_inputs()
    args = (q, k, v, window_mask, key_bias if with_bias else None)
    report = flashgen.explain(_windowed, *args)
    assert [s.replaced for s in report.sites] == [True], str(report)
    assert report.sites[0].mask == "add"
    got, want = _compiled(_windowed, *args), _windowed(*args)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    inputs = [q, k, v, window_mask]
    for name, g, r in zip("qkvm", _grads(got, inputs), _grads(want, inputs), strict=True):
        torch.testing.assert_close(g, r, atol=2e-5, rtol=1e-4, msg=name)


def _windowed_any(q, k, v, window_mask):
    """`_windowed` with the split's sizes read from the inputs (HF's `batch_size // mask_shape`):
    symbolic under dynamic=True."""
    windows = window_mask.shape[0]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.view(q.shape[0] // windows, windows, H, N, N) + window_mask.unsqueeze(1).unsqueeze(0)
    return torch.softmax(s.view(-1, H, N, N), dim=-1) @ v


def test_a_mask_added_per_window_under_dynamic_shapes():
    """One graph with the batch and window counts symbolic serves every count: replaced, and
    equal to eager at each."""
    from flashgen.compile.patterns.core import counters

    before = counters["matmul.replaced"]
    torch._dynamo.reset()
    fn = torch.compile(_windowed_any, backend=backend(fallback="aot_eager"), dynamic=True)
    g = torch.Generator().manual_seed(15)
    for images, windows in ((2, 3), (3, 4), (1, 5)):
        q, k, v = (torch.randn(images * windows, H, N, D, generator=g) for _ in "qkv")
        window_mask = torch.randn(windows, N, N, generator=g)
        got, want = fn(q, k, v, window_mask), _windowed_any(q, k, v, window_mask)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    assert counters["matmul.replaced"] - before == 1  # (one graph)


def test_a_kept_or_reported_site_leaves_the_graph_as_it_was():
    """A report-only pass over a site it would replace, and a pass over one it keeps (float64,
    which the kernels do not take), hand back the graph unchanged (the fold undone); the kept
    site's compiled function computes eager's values."""
    from flashgen.compile.backend import default_op
    from flashgen.compile.patterns import attention_pass

    q, k, v, window_mask, _ = _window_inputs()
    wide = [t.detach().double() for t in (q, k, v, window_mask)]
    seen = []

    def check(gm, example_inputs):
        before = str(gm.graph)
        for rewrite in (False, True):  # (the kept site's rewriting pass too)
            if rewrite and seen[-1] == [True]:
                break
            sites = attention_pass(gm, list(example_inputs), default_op(), rewrite_graph=rewrite)
            seen.append([s.replaced for s in sites])
            assert str(gm.graph) == before
        return gm.forward

    for args in ((q, k, v, window_mask), wide):
        torch._dynamo.reset()
        torch.compile(_windowed, backend=check)(*args)
    assert seen == [[True], [False], [False]]
    site = flashgen.explain(_windowed, *wide).sites[0]
    assert not site.replaced and "float64" in site.reason
    torch.testing.assert_close(_compiled(_windowed, *wide), _windowed(*wide))


transformers = pytest.importorskip("transformers")


def test_hf_swinv2_replaced_and_matches_float64():
    """Every site of a small Swin v2 (windows of 16 patches; the first stage's second block
    shifted, its mask added to scores viewed per window: `window_views`) replaced; the output
    and every parameter's gradient (the learned logit scales' among them) match a float64
    copy's in training mode, each within 1e-4 of its largest entry (eager float32's: 2e-5)."""
    torch.manual_seed(0)
    cfg = transformers.Swinv2Config(
        image_size=32, patch_size=4, embed_dim=32, depths=[2, 2], num_heads=[2, 4],
        window_size=4, drop_path_rate=0.0, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = transformers.Swinv2Model(cfg).train()
    with torch.no_grad():  # logit scales apart from their initial log(10)
        for name, p in model.named_parameters():
            if name.endswith("logit_scale"):
                p.uniform_(0.5, 3.0)
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(12))
    report = flashgen.explain(model, pixel_values=images)
    assert report.found == 4 and all(s.replaced for s in report.sites), str(report)
    assert sum(s.mask == "add" for s in report.sites) == 4  # (the relative bias, the mask)

    def run(model, call, x):
        model.zero_grad()
        out = call(pixel_values=x).last_hidden_state
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(13)).to(out.dtype)
        (out * w).sum().backward()
        return out, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    ref_model = copy.deepcopy(model).double()
    want, want_grads = run(ref_model, ref_model, images.double())
    torch._dynamo.reset()
    got, grads = run(model, torch.compile(model, backend="flashgen"), images)
    assert (got.double() - want).abs().max() <= 1e-4 * want.abs().max()
    scales = [n for n in want_grads if n.endswith("logit_scale")]
    assert len(scales) == 4 and all(want_grads[n].abs().max() > 1e-2 for n in scales)
    assert grads.keys() == want_grads.keys()
    for name, g in want_grads.items():
        err = (grads[name].double() - g).abs().max() / g.abs().max()
        assert err <= 1e-4, f"{name}: {err:.2e}"
