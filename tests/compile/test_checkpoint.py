"""Attention inside activation checkpointing (`torch.utils.checkpoint.checkpoint(fn, x,
use_reentrant=False)`, what a training loop that checkpoints every block writes): Dynamo
traces the checkpointed call as the higher-order op `tag_activation_checkpoint(body, ...)`
with the attention in `body`, a submodule of the graph the backend gets. The pass rewrites
the body in place (`patterns.passes._checkpoint_bodies`): the sites are replaced, the op runs
(recorded at run time) with the causal flag proven inside the body, for an SDPA `is_causal`
call and for a hand-written softmax whose mask is a `tril` buffer (module state, proven from
its real value as outside a body); output and gradients equal eager's, static and dynamic
shapes, through AOTAutograd's recompute and through Inductor."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import is_fake
from torch.utils.checkpoint import checkpoint

import flashgen


class _Block(torch.nn.Module):
    def __init__(self, width: int, heads: int, hand_written: bool, max_len: int = 32):
        super().__init__()
        self.heads, self.hand_written = heads, hand_written
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))  # fmt: skip

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.hand_written:  # nanoGPT's attention without flash
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.tril[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        return x + checkpoint(self.attend, x, use_reentrant=False)


def _model(hand_written: bool):
    torch.manual_seed(0)
    return torch.nn.Sequential(*(_Block(32, 2, hand_written) for _ in range(2)))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("hand_written", [False, True], ids=["sdpa", "hand_written"])
def test_checkpointed_attention_is_replaced_and_matches_eager(hand_written, dynamic):
    """The op runs in the forward and again in the backward's recompute (recorded at run time:
    the rewritten graph run as Python, `fallback="eager"`), with the causal flag and no mask
    tensor; then the same graph through AOTAutograd (`aot_eager`): output and gradients."""
    import flashgen.ops  # noqa: F401 - registers torch.ops.flashgen

    model = _model(hand_written)
    report = flashgen.explain(model, torch.randn(2, 9, 32))
    assert len(report.sites) == 2 and all(s.replaced and s.causal for s in report.sites), report
    real, calls = torch.ops.flashgen.attention.default, []

    def recording_op(q, k, v, causal, *args, **kwargs):
        if not is_fake(q):  # (compiling runs the graph once on fake tensors)
            calls.append((tuple(q.shape), causal, args[5:6]))  # (args[5]: attn_mask, if given)
        return real(q, k, v, causal, *args, **kwargs)

    for fallback in ("eager", "aot_eager"):
        torch._dynamo.reset()
        op = recording_op if fallback == "eager" else None
        compiled = torch.compile(
            model, dynamic=dynamic, backend=flashgen.backend(op=op, fallback=fallback)
        )
        for t in (9, 13):
            x = torch.randn(2, t, 32, requires_grad=True)
            params = [x, *model.parameters()]
            want = model(x)
            want_grads = torch.autograd.grad(want.square().sum(), params)
            calls.clear()
            got = compiled(x)
            got_grads = torch.autograd.grad(got.square().sum(), params)
            if fallback == "eager":  # two blocks, each forward and recomputed in the backward
                assert calls == [((2, 2, t, 16), True, ())] * 4, calls
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
            for g, w in zip(got_grads, want_grads, strict=True):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_checkpointed_attention_through_inductor():
    """The default fallback (Inductor) compiles the rewritten body (both sites replaced):
    output and gradients."""
    from flashgen.compile.patterns.core import counters

    model = _model(hand_written=False)
    x = torch.randn(2, 11, 32, requires_grad=True)
    params = [x, *model.parameters()]
    want = model(x)
    want_grads = torch.autograd.grad(want.square().sum(), params)
    torch._dynamo.reset()
    before = counters["sdpa.replaced"]
    got = torch.compile(model, backend="flashgen")(x)
    assert counters["sdpa.replaced"] - before == 2
    got_grads = torch.autograd.grad(got.square().sum(), params)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


class _DropoutBlock(torch.nn.Module):
    def __init__(self, checkpointed: bool):
        super().__init__()
        self.checkpointed = checkpointed
        self.qkv = torch.nn.Linear(32, 96)

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.3)
        return y.transpose(1, 2).reshape(b, t, c)

    def forward(self, x):
        return x + (checkpoint(self.attend, x, use_reentrant=False) if self.checkpointed else self.attend(x))  # fmt: skip


def test_checkpointed_dropout_recomputes_the_same_mask():
    """Attention dropout inside a checkpointed block: the backward's recompute must drop what
    the forward dropped. The kernels draw from a seed that is an op of the graph (PyTorch's
    generator), which AOTAutograd does not draw again for the recompute: output and gradients
    equal those of the same blocks without checkpointing, under the same `manual_seed`, and the
    site is replaced with its dropout. (Dynamo's `eager` backend, which skips AOTAutograd, draws
    again for PyTorch's own SDPA as well; not a fallback to train with.)"""
    x = torch.randn(2, 9, 32, requires_grad=True)
    runs = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(_DropoutBlock(checkpointed) for _ in range(2)))
        report = flashgen.explain(model, x)
        assert len(report.sites) == 2, report
        assert all(s.replaced and s.dropout == 0.3 for s in report.sites), report
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=flashgen.backend(fallback="aot_eager"))
        torch.manual_seed(1)
        out = compiled(x)
        runs.append((out, torch.autograd.grad(out.square().sum(), [x, *model.parameters()])))
    (out, grads), (out_ac, grads_ac) = runs
    torch.testing.assert_close(out_ac, out, atol=0, rtol=0)
    for g, w in zip(grads_ac, grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)
