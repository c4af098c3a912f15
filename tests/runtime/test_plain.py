"""The extras-free eager path (`composite._plain_attention`, `primitives.plain_forward` /
`plain_backward`): a call without window, softcap, lengths, mask or dropout skips the extras'
branches. What must hold: it is taken exactly for such calls in plain eager mode, it computes
bit for bit what the general path computes (forward, gradients, the decode kernels for a short
query), and everything else (extras, dispatch modes) still takes the general path.
"""

from __future__ import annotations

import pytest
import torch
from see_ops import SeeOps

import flashgen
from flashgen.runtime import autograd, composite, primitives


@pytest.fixture
def taken(monkeypatch):
    """Counts of the plain forward and backward bodies that ran."""
    seen = {"fwd": 0, "bwd": 0}
    real_fwd, real_bwd = primitives.plain_forward, primitives.plain_backward

    def fwd(*args, **kwargs):
        seen["fwd"] += 1
        return real_fwd(*args, **kwargs)

    def bwd(*args):
        seen["bwd"] += 1
        return real_bwd(*args)

    for module in (composite, autograd):
        monkeypatch.setattr(module, "plain_forward", fwd)
    monkeypatch.setattr(autograd, "plain_backward", bwd)
    return seen


def _qkv(seq_q: int, grad: bool):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, seq_q, 16, generator=gen)
    k, v = (torch.randn(1, 2, 37, 16, generator=gen) for _ in range(2))
    return [t.requires_grad_(grad) for t in (q, k, v)]


def _general(q, k, v, causal):
    """The general path's result: the composite op's body with every extra at its default."""
    return composite._attention(q, k, v, causal, None, impl="flashgen")


@pytest.mark.parametrize("seq_q", [37, 3], ids=["forward-kernels", "decode-kernels"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_plain_forward_equals_the_general_path(taken, seq_q, causal):
    q, k, v = _qkv(seq_q, grad=False)
    got = flashgen.attention(q, k, v, causal=causal, impl="flashgen")
    assert taken == {"fwd": 1, "bwd": 0}
    want = _general(q, k, v, causal)
    assert taken["fwd"] == 1  # the general path did not take it
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_plain_gradients_equal_the_general_path(taken, causal):
    q, k, v = _qkv(37, grad=True)
    do = torch.randn(1, 4, 37, 16, generator=torch.Generator().manual_seed(1))
    out = flashgen.attention(q, k, v, causal=causal, impl="flashgen")
    got = (out.detach(), *torch.autograd.grad(out, (q, k, v), do))
    assert taken == {"fwd": 1, "bwd": 1}
    out = _general(q, k, v, causal)
    want = (out.detach(), *torch.autograd.grad(out, (q, k, v), do))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_only_the_gradients_asked_for(taken):
    q, k, v = _qkv(37, grad=False)
    k.requires_grad_(True)
    (dk,) = torch.autograd.grad(flashgen.attention(q, k, v, impl="flashgen").sum(), (k,))
    assert taken["bwd"] == 1 and dk.shape == k.shape


@pytest.mark.parametrize(
    "extra",
    [
        {"softcap": 30.0},
        {"window": (4, 4)},
        {"key_lengths": [30]},
        {"attn_mask": torch.ones(37, dtype=torch.bool)},
        {"dropout_p": 0.5},
        {"causal": True, "causal_align": "bottom_right"},
    ],
    ids=["softcap", "window", "lengths", "mask", "dropout", "bottom-right"],
)
def test_calls_with_extras_take_the_general_path(taken, extra):
    q, k, v = _qkv(20, grad=True)  # (equal lengths would make bottom-right plain causal)
    out = flashgen.attention(q, k, v, impl="flashgen", **extra)
    out.sum().backward()
    assert taken == {"fwd": 0, "bwd": 0}


@pytest.mark.parametrize(
    "extra", [{"dropout_p": 0}, {"padding": "left"}], ids=["int-dropout", "left-padding"]
)
def test_arguments_only_the_general_checks_accept_go_there(monkeypatch, extra):
    """An int dropout_p of 0, or left padding without lengths, are valid but not the public
    function's shortcut (its test is cheap: a float 0.0, padding "right"); their call is
    checked by the general path, whose autograd then runs the plain kernels all the same."""
    import flashgen.ops

    called = []
    monkeypatch.setattr(flashgen.ops, "_plain_attention", lambda *a: called.append(a))
    q, k, v = _qkv(37, grad=False)
    out = flashgen.attention(q, k, v, impl="flashgen", **extra)
    assert called == [] and out.shape == q.shape


def test_bad_arguments_are_still_refused():
    q, k, v = _qkv(37, grad=False)
    with pytest.raises(ValueError, match="deterministic"):
        flashgen.attention(q, k, v, deterministic="yes")
    with pytest.raises(ValueError, match="dropout_p"):
        flashgen.attention(q, k, v, dropout_p=False)
    with pytest.raises(ValueError, match="head_dim"):
        flashgen.attention(q[..., :4], k[..., :4], v[..., :4])


def test_a_dispatch_mode_still_sees_the_ops(taken):
    q, k, v = _qkv(37, grad=True)
    with SeeOps() as mode:
        out = flashgen.attention(q, k, v, impl="flashgen")
        out.sum().backward()
    assert "flashgen.attention_fwd.default" in mode.seen
    assert "flashgen.attention_bwd.default" in mode.seen
    assert taken == {"fwd": 0, "bwd": 0}


@pytest.mark.parametrize("asked", [(True, True, True), (False, True, False)], ids=["all", "dk"])
def test_a_backward_under_a_dispatch_mode_goes_through_the_op(taken, asked):
    """A plain call's node (`autograd._PlainAttention`) whose backward runs under a dispatch
    mode calls the backward op (the mode sees it) and gives what the plain backward gives,
    None for the gradients not asked for."""
    q, k, v = _qkv(37, grad=False)
    leaves = [t.requires_grad_(a) for t, a in zip((q, k, v), asked, strict=True)]
    wanted = [t for t in leaves if t.requires_grad]
    do = torch.randn(1, 4, 37, 16, generator=torch.Generator().manual_seed(2))
    out = flashgen.attention(q, k, v, impl="flashgen")
    assert type(out.grad_fn).__name__ == "_PlainAttentionBackward"
    want = torch.autograd.grad(out, wanted, do, retain_graph=True)
    assert taken == {"fwd": 1, "bwd": 1}
    with SeeOps() as mode:
        got = torch.autograd.grad(out, wanted, do)
    assert "flashgen.attention_bwd.default" in mode.seen
    assert taken == {"fwd": 1, "bwd": 1}
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_forward_without_backward_writes_lse_to_the_scratch_buffer(monkeypatch):
    """keep_lse=False: the same output, no lse returned, one scratch buffer per device reused
    call after call; a call with more rows than the buffer allocates its own."""
    from flashgen.kernels import fwd
    from flashgen.runtime.dispatch import plan_config

    q, k, v = _qkv(37, grad=False)
    want, lse = fwd.forward(q, k, v, causal=True, scale=0.25, config=plan_config)
    assert lse is not None
    got = [fwd.forward(q, k, v, causal=True, scale=0.25, config=plan_config, keep_lse=False)]
    buf = fwd._scratch[q.device]
    got.append(fwd.forward(q, k, v, causal=True, scale=0.25, config=plan_config, keep_lse=False))
    assert fwd._scratch[q.device] is buf
    for out, none in got:
        assert none is None
        torch.testing.assert_close(out, want, rtol=0, atol=0)
    # what the kernel wrote there is this call's logsumexp (rows in [B, H, S] order)
    torch.testing.assert_close(buf[: lse.numel()], lse.flatten(), rtol=0, atol=0)
    monkeypatch.setattr(fwd, "SCRATCH_FLOATS", 8)
    buf.zero_()
    out, none = fwd.forward(q, k, v, causal=True, scale=0.25, config=plan_config, keep_lse=False)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert none is None and not buf.any()


@pytest.mark.parametrize("scale", [None, 0.3], ids=["default-scale", "scale"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_launchers_plain_forward_equals_forward(causal, scale):
    """`fwd.forward_plain` (the plain path's launcher: its own plan key, no extras' branches)
    returns what `fwd.forward` does, bit for bit, lse kept or not, and keeps its plan; an
    empty batch launches nothing."""
    from flashgen.kernels import fwd
    from flashgen.runtime.dispatch import plan_config

    q, k, v = _qkv(37, grad=False)
    want, want_lse = fwd.forward(q, k, v, causal=causal, scale=scale, config=plan_config)
    fwd._plans.clear()
    out, lse = fwd.forward_plain(q, k, v, causal, scale, plan_config, True)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    torch.testing.assert_close(lse, want_lse, rtol=0, atol=0)
    assert len(fwd._plans) == 1
    out, none = fwd.forward_plain(q, k, v, causal, scale, plan_config, False)
    assert none is None and len(fwd._plans) == 1  # the same plan again
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    out, lse = fwd.forward_plain(q[:0], k[:0], v[:0], causal, scale, plan_config, True)
    assert out.shape == (0, 4, 37, 16) and lse.shape == (0, 4, 37) and len(fwd._plans) == 1
