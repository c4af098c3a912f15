"""Logit softcapping in compiled graphs (issue 16): hand-written attention whose scaled scores
go through `cap * tanh(scores / cap)` before the mask and the softmax (Gemma-2's eager
attention) is replaced by the flashgen op with `softcap=cap`, and the compiled result matches
float64 forward and backward. Spellings the kernels cannot compute (a mask inside the tanh, two
different caps, a tanh without its factor) are left to Inductor with the reason.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend

CAP = 7.0  # small beside the test's scores, so the cap changes the result


def _scores(q, k):
    return (q @ k.transpose(-2, -1)) * (q.size(-1) ** -0.5)


def gemma(q, k, v):
    """Gemma-2's eager spelling: divide, tanh, multiply, then the additive causal mask."""
    s = _scores(q, k)
    s = s / CAP
    s = torch.tanh(s)
    s = s * CAP
    t = q.size(-2)
    hidden = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    s = s + torch.zeros(t, t, device=q.device).masked_fill(hidden, float("-inf"))
    return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v


def one_line(q, k, v):
    """`tanh(s * (1 / cap)) * cap` in one expression, no mask, a masked_fill causal variant
    below."""
    s = torch.tanh(_scores(q, k) * (1.0 / CAP)) * CAP
    return torch.softmax(s, dim=-1) @ v


def causal_fill(q, k, v):
    s = CAP * _scores(q, k).div(CAP).tanh()
    t = q.size(-2)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def mask_inside(q, k, v):
    t = q.size(-2)
    s = _scores(q, k).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(torch.tanh(s / CAP) * CAP, dim=-1) @ v


def two_caps(q, k, v):
    return torch.softmax(torch.tanh(_scores(q, k) / CAP) * (2 * CAP), dim=-1) @ v


def no_factor(q, k, v):
    return torch.softmax(torch.tanh(_scores(q, k) / CAP), dim=-1) @ v


def _reference(q, k, v, causal):
    s = _scores(q.double(), k.double())
    s = CAP * torch.tanh(s / CAP)
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), -math.inf)
    return torch.softmax(s, -1) @ v.double()


def _inputs(t=13, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    # scores of a few units and more: the cap of 7 bends the largest of them
    return [(3 * torch.randn(2, 2, t, d, generator=g)).requires_grad_() for _ in range(3)]


@pytest.mark.parametrize(
    "fn, causal", [(gemma, True), (one_line, False), (causal_fill, True)],
    ids=["gemma", "one-line", "masked-fill"],
)  # fmt: skip
def test_softcap_is_replaced_and_matches_float64(fn, causal):
    report = flashgen.explain(fn, *_inputs())
    (site,) = report.sites
    assert site.replaced, site.reason
    assert site.softcap == pytest.approx(CAP) and site.causal == causal
    assert f"softcap {CAP:g}" in str(report)
    qkv = _inputs(seed=1)
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend(fallback="aot_eager"))(*qkv)
    after = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    assert after - before == 1
    ref_in = [x.detach().double().requires_grad_() for x in qkv]
    ref = _reference(*ref_in, causal)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-4)
    # the cap matters here: without it the output differs
    plain = torch.softmax(_scores(*ref_in[:2]).masked_fill(
        torch.ones(13, 13, dtype=torch.bool).triu(1) if causal else torch.zeros(13, 13, dtype=torch.bool),
        -math.inf), -1) @ ref_in[2]  # fmt: skip
    assert (plain - ref).abs().max() > 1e-2
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, qkv, do)
    want = torch.autograd.grad(ref, ref_in, do.double())
    for name, g, w in zip("qkv", got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4, msg=f"d{name}")


@pytest.mark.parametrize(
    "fn, reason",
    [
        (mask_inside, "inside the softcap's tanh"),
        (two_caps, "one positive cap"),
        (no_factor, "without a cap factor"),
    ],
    ids=["mask-inside", "two-caps", "no-factor"],
)
def test_softcap_spellings_the_kernels_cannot_compute_are_skipped(fn, reason):
    q, k, v = (x.detach() for x in _inputs())
    report = flashgen.explain(fn, q, k, v)
    (site,) = report.sites
    assert not site.replaced and reason in site.reason, site.reason
    torch._dynamo.reset()  # and the compiled model still gives eager's result
    got = torch.compile(fn, backend=backend(fallback="aot_eager"))(q, k, v)
    torch.testing.assert_close(got, fn(q, k, v))


transformers = pytest.importorskip("transformers")


def test_gemma2_eager_attention_replaced_and_matches_eager():
    """HF Gemma-2 from a config (eager attention, the one HF runs softcapping with: local
    sliding-window and global layers, GQA): every site replaced with its softcap, the output
    equal to eager's, and every parameter gradient as close to float64 eager's as float32
    eager's is. The loss weighs the output by fixed random numbers: the model ends in an
    RMSNorm, whose rows' sum of squares does not move (a loss of it gave the attention weights
    gradients of ~1e-4, rounding noise, against ~150 on the norm's weight), so this one gives
    them real gradients. Against float64 still, as float32 eager is only so close to it."""
    torch.manual_seed(0)
    cfg = transformers.Gemma2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        sliding_window=8, attn_logit_softcapping=5.0, final_logit_softcapping=None,
        query_pre_attn_scalar=16, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.Gemma2Model(cfg)
    ids = torch.randint(1, 64, (2, 13), generator=torch.Generator().manual_seed(1))
    report = flashgen.explain(model, input_ids=ids)
    assert report.found == 2 and report.replaced == 2, str(report)
    assert all(s.softcap == pytest.approx(5.0) for s in report.sites)
    torch._dynamo.reset()
    weights = torch.randn(2, 13, 32, generator=torch.Generator().manual_seed(2))
    want = model(input_ids=ids).last_hidden_state
    (want * weights).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert all(want_grads[n].abs().max() > 1e-2 for n in want_grads if "q_proj" in n)
    model.zero_grad()
    got = torch.compile(model, backend="flashgen")(input_ids=ids).last_hidden_state
    (got * weights).sum().backward()
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    exact = copy.deepcopy(model).double()
    exact.zero_grad()
    (exact(input_ids=ids).last_hidden_state * weights.double()).sum().backward()
    for name, g in want_grads.items():
        g64 = exact.get_parameter(name).grad
        eager_err = (g.double() - g64).abs().max().item()
        err = (model.get_parameter(name).grad.double() - g64).abs().max().item()
        assert err <= 3 * eager_err + 1e-6 * g64.abs().max().item(), (name, err, eager_err)
