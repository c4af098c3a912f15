"""cuDNN's backward on flashgen's forward (`flashgen.runtime.vendor.hybrid_backward`): when it is
chosen, that `route` answers MIX and the autograd function hands flashgen's out and logsumexp to
cuDNN's backward and returns what it gives, and when it is not (forced, deterministic, extras);
on the GPU, that its gradients match float64 for the layouts models pass, eagerly and under
torch.compile."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import flashgen
from flashgen.core.impls import FLASHGEN
from flashgen.runtime import autograd, vendor


def _fake(shape=(1, 2, 8, 16), dtype=torch.bfloat16, cuda=True, grad=True):
    """What hybrid_backward reads of a tensor, for the decision alone (no GPU needed)."""
    return SimpleNamespace(shape=shape, dtype=dtype, is_cuda=cuda, requires_grad=grad)


@pytest.mark.parametrize(
    ("fwd", "bwd", "want"),
    [
        (FLASHGEN, "sdpa_cudnn", True),  # the mix: flashgen's forward, cuDNN's backward
        ("sdpa_cudnn", "sdpa_cudnn", False),  # cuDNN both ways: SDPA runs the whole call
        (FLASHGEN, FLASHGEN, False),  # flashgen both ways
        (FLASHGEN, "sdpa_flash", False),  # only cuDNN's backward takes flashgen's statistics
    ],
)
def test_the_mix_needs_flashgen_forward_and_cudnn_backward(monkeypatch, fwd, bwd, want):
    monkeypatch.setattr(
        vendor, "winner", lambda q, k, v, causal, backward, **kw: bwd if backward else fwd
    )
    q = _fake()
    assert vendor.hybrid_backward(q, q, q, True, True) is want


def test_the_mix_needs_a_gradient_a_16_bit_cuda_input_and_no_determinism(monkeypatch):
    monkeypatch.setattr(
        vendor,
        "winner",
        lambda q, k, v, causal, backward, **kw: "sdpa_cudnn" if backward else FLASHGEN,
    )
    assert vendor.hybrid_backward(*[_fake()] * 3, False, True) is True
    assert vendor.hybrid_backward(*[_fake()] * 3, False, False) is False  # no backward
    assert vendor.hybrid_backward(*[_fake(cuda=False)] * 3, False, True) is False
    assert vendor.hybrid_backward(*[_fake(dtype=torch.float32)] * 3, False, True) is False
    torch.use_deterministic_algorithms(True)
    try:
        assert vendor.hybrid_backward(*[_fake()] * 3, False, True) is False
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setenv(vendor.MIX_ENV, "0")  # switched off
    assert vendor.hybrid_backward(*[_fake()] * 3, False, True) is False


def _choose_mix(monkeypatch, *, cuda: bool):
    """Records naming cuDNN for the backward and flashgen for the forward at every shape (a
    training call's forward included), and no call launch-bound (`route` would hand a small
    eager call to SDPA). On the CPU the mix's own conditions (CUDA, 16-bit)
    cannot hold: there `hybrid_backward` is taken as true too."""
    monkeypatch.setattr(
        vendor,
        "winner",
        lambda q, k, v, causal, backward, **kw: "sdpa_cudnn" if backward else FLASHGEN,
    )
    monkeypatch.setattr(vendor, "launch_bound", lambda q, k: False)
    if not cuda:
        monkeypatch.setattr(vendor, "hybrid_backward", lambda *a, **kw: True)


def _inputs(b=2, hq=4, hkv=2, n=37, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, n, d, generator=g)
    k, v = (torch.randn(b, hkv, n, d, generator=g) for _ in range(2))
    return [t.requires_grad_() for t in (q, k, v)]


class _Spy:
    """Stands in for cuDNN's backward on the CPU: records what it got and returns gradients
    that no flashgen kernel would give (the inputs times 3), so the test sees which ran."""

    def __init__(self):
        self.calls = []

    def __call__(self, do, q, k, v, out, lse, causal, scale):
        self.calls.append((out.detach().clone(), lse.detach().clone(), causal, scale))
        return q.detach() * 3, k.detach() * 3, v.detach() * 3


@pytest.fixture
def spy(monkeypatch):
    """The mix chosen for every plain call `route` is asked about, cuDNN's backward replaced."""
    s = _Spy()
    _choose_mix(monkeypatch, cuda=False)
    monkeypatch.setattr(autograd, "cudnn_backward", s)
    return s


@pytest.mark.parametrize("causal", [False, True])
def test_the_backward_gets_flashgen_out_and_lse_and_returns_its_gradients(spy, causal):
    q, k, v = _inputs()
    out = flashgen.attention(q, k, v, causal=causal)
    gq, gk, gv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert len(spy.calls) == 1
    seen_out, lse, seen_causal, scale = spy.calls[0]
    assert seen_causal == causal and scale == pytest.approx(16**-0.5)
    torch.testing.assert_close(seen_out, out.detach())
    # the forward's logsumexp: float32 [B, Hq, Sq], natural log of the softmax denominator
    qd, kd = q.detach().double(), k.detach().double().repeat_interleave(2, 1)
    s = qd @ kd.transpose(-1, -2) / 4.0
    if causal:
        s = s.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)
    for got, t in zip((gq, gk, gv), (q, k, v), strict=True):
        assert torch.equal(got, t.detach() * 3)


def test_a_refusing_backend_leaves_the_backward_to_flashgen(monkeypatch):
    """cuDNN's backward raising for an input (a case its forward would also have refused):
    flashgen's own backward runs on the same forward, with a warning, not an error, and the
    refusal is remembered: the next such call is not mixed (cuDNN not asked again)."""
    _choose_mix(monkeypatch, cuda=False)
    monkeypatch.setattr(vendor, "_refused", set())  # this test's refusals stay in it
    asked = []

    def refuse(*a):
        asked.append(1)
        raise RuntimeError("No valid execution plans built.")

    monkeypatch.setattr(autograd, "cudnn_backward", refuse)
    q, k, v = _inputs(seed=5)
    out = flashgen.attention(q, k, v, causal=True)
    got = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert asked == [1]
    out2 = flashgen.attention(q, k, v, causal=True, impl="flashgen")  # flashgen both ways
    want = torch.autograd.grad(out2, (q, k, v), torch.ones_like(out2))
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)
    again = flashgen.attention(q, k, v, causal=True)
    torch.autograd.grad(again, (q, k, v), torch.ones_like(again))
    assert asked == [1]  # remembered: not asked again
    vendor.clear_refusals()
    again = flashgen.attention(q, k, v, causal=True)
    torch.autograd.grad(again, (q, k, v), torch.ones_like(again))
    assert asked == [1, 1]  # forgotten: the mix is tried again


def test_only_the_asked_gradients_are_returned(spy):
    q, k, v = _inputs()
    k.requires_grad_(False)
    out = flashgen.attention(q, k, v)
    gq, gv = torch.autograd.grad(out, (q, v), torch.ones_like(out))
    assert torch.equal(gq, q.detach() * 3) and torch.equal(gv, v.detach() * 3)


@pytest.mark.parametrize(
    "kw",
    [
        {"impl": "flashgen"},  # forced: flashgen's own kernels both ways
        {"deterministic": True},  # flashgen's bit-reproducible split backward
        {"window": (4, 0)},  # extras: flashgen's kernels
        {"softcap": 20.0},
    ],
    ids=["forced", "deterministic", "window", "softcap"],
)
def test_no_mix_when_forced_deterministic_or_with_extras(spy, kw):
    q, k, v = _inputs()
    out = flashgen.attention(q, k, v, causal=True, **kw)
    torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert spy.calls == []


def test_a_compiled_graph_keeps_the_mix_chosen_when_it_was_traced(spy):
    """Under torch.compile the op is decomposed by AOTAutograd, which runs the choice and the
    autograd function as Python: the backward graph calls the mix's backward."""
    q, k, v = _inputs(seed=4)

    def f(q, k, v):
        return flashgen.attention(q, k, v, causal=True)

    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(q, k, v)
    got = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    torch._dynamo.reset()
    assert spy.calls
    for g, t in zip(got, (q, k, v), strict=True):
        assert torch.equal(g, t.detach() * 3)


def test_no_mix_under_torch_deterministic_flag(spy):
    q, k, v = _inputs()
    torch.use_deterministic_algorithms(True)
    try:
        out = flashgen.attention(q, k, v, causal=True)
        torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    finally:
        torch.use_deterministic_algorithms(False)
    assert spy.calls == []


# ---- on the GPU: cuDNN's real backward -------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _grads_ref(q, k, v, do, causal):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    g = q.shape[1] // k.shape[1]
    kk, vv = (t.repeat_interleave(g, 1) for t in leaves[1:])
    s = leaves[0] @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    return torch.autograd.grad(s.softmax(-1) @ vv, leaves, do.double())


def _cuda_inputs(layout, b, hq, hkv, n, d, dtype=torch.bfloat16, seed=0):
    """q, k, v requiring grad, [B, H, N, D] (bhsd) or transposed views of [B, N, H, D] (bshd,
    how HF models pass them)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes = ((b, hq, n, d), (b, hkv, n, d), (b, hkv, n, d))
    if layout == "bhsd":
        ts = [torch.randn(s, device="cuda", dtype=dtype, generator=g) for s in shapes]
    else:
        ts = [
            torch.randn(s[0], s[2], s[1], s[3], device="cuda", dtype=dtype, generator=g)
            .transpose(1, 2)
            for s in shapes
        ]  # fmt: skip
    return [t.requires_grad_() for t in ts]


def _rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max()).item()


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("hq", "hkv", "d"), [(8, 2, 64), (4, 4, 128)], ids=["gqa-d64", "d128"])
def test_cudnn_backward_on_flashgen_forward_matches_float64(
    layout, causal, hq, hkv, d, monkeypatch
):
    """Through the public op with the mix chosen: gradients against float64 within the error of
    cuDNN's own forward + backward on the same inputs (plus a small floor), dO arriving as a
    transposed view (what `.transpose(1, 2)` after attention gives) or contiguous."""
    calls = []
    _choose_mix(monkeypatch, cuda=True)
    monkeypatch.setattr(autograd, "cudnn_backward",
                        lambda *a: calls.append(1) or vendor.cudnn_backward(*a))  # fmt: skip
    q, k, v = _cuda_inputs(layout, 2, hq, hkv, 333, d)
    do = torch.randn(2, 333, hq, d, device="cuda", dtype=q.dtype).transpose(1, 2)
    out = flashgen.attention(q, k, v, causal=causal)
    got = torch.autograd.grad(out, (q, k, v), do)
    assert calls == [1]
    want = _grads_ref(q, k, v, do, causal)
    own = torch.autograd.grad(
        torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=hq != hkv
        ),
        (q, k, v),
        do,
    )
    for name, a, c, w in zip("qkv", got, own, want, strict=True):
        assert _rel(a, w) <= 2 * _rel(c, w) + 2e-3, f"d{name}: {_rel(a, w)} vs SDPA {_rel(c, w)}"


@pytest.mark.gpu
@gpu
def test_the_mix_under_torch_compile_matches_eager(monkeypatch):
    """A compiled function's graph holds cuDNN's backward op on flashgen's forward when the mix
    is chosen at trace time; its gradients equal the eager call's."""
    calls = []
    _choose_mix(monkeypatch, cuda=True)
    monkeypatch.setattr(autograd, "cudnn_backward",
                        lambda *a: calls.append(1) or vendor.cudnn_backward(*a))  # fmt: skip
    q, k, v = _cuda_inputs("bshd", 2, 8, 2, 256, 64, seed=3)
    do = torch.randn_like(q)

    def f(q, k, v):
        return flashgen.attention(q, k, v, causal=True)

    eager = torch.autograd.grad(f(q, k, v), (q, k, v), do)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v), do)
    assert len(calls) >= 2  # the eager call's backward and the compiled graph's
    for a, b in zip(got, eager, strict=True):
        torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@gpu
def test_the_mix_under_inductor_matches_float64(monkeypatch):
    """An HF-style block compiled by Inductor (q/k/v as transposed views of [B, N, H, D], the
    output transposed back and projected, so dO reaches the backward in whatever layout
    Inductor gives it): with the mix chosen at trace time, the gradients of q, k, v against
    float64 within twice the error of SDPA's own cuDNN forward + backward (plus a floor)."""
    calls = []
    _choose_mix(monkeypatch, cuda=True)
    monkeypatch.setattr(autograd, "cudnn_backward",
                        lambda *a: calls.append(1) or vendor.cudnn_backward(*a))  # fmt: skip
    b, n, hq, hkv, d = 2, 512, 8, 2, 128
    q, k, v = _cuda_inputs("bshd", b, hq, hkv, n, d, seed=5)
    w = torch.randn(hq * d, 64, device="cuda", dtype=q.dtype) / 32

    def block(q, k, v, attend):
        return (attend(q, k, v).transpose(1, 2).reshape(b, n, hq * d) @ w).float().square().sum()

    def ours(q, k, v):
        return flashgen.attention(q, k, v, causal=True)

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)  # fmt: skip

    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: block(q, k, v, ours), fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    torch._dynamo.reset()
    assert calls, "the compiled backward did not run cuDNN's backward on flashgen's forward"
    own = torch.autograd.grad(block(q, k, v, sdpa), (q, k, v))
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(hq // hkv, 1) for t in leaves[1:])
    s = leaves[0] @ kk.transpose(-1, -2) / math.sqrt(d)
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1), -math.inf)
    o = (s.softmax(-1) @ vv).transpose(1, 2).reshape(b, n, hq * d) @ w.double()
    want = torch.autograd.grad(o.square().sum(), leaves)
    for name, a, c, x in zip("qkv", got, own, want, strict=True):
        assert _rel(a, x) <= 2 * _rel(c, x) + 2e-3, f"d{name}: {_rel(a, x)} vs SDPA {_rel(c, x)}"
