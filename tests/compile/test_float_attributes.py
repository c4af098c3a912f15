"""Float module attributes under `torch.compile(..., dynamic=True)`: Dynamo turns such an
attribute (HF's `self.attention_dropout` and `self.scaling`, Gemma-2's softcap) into a tensor
input read with `.item()`, a value that may change at every call without a recompile. The
pass takes its value with a guard on the attribute (`patterns.core.attribute_number`), so the
site is replaced, and changing the attribute recompiles the frame with the new value (recorded
at run time) instead of running the kernels with a stale one."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from model_checks import recording_op  # (tests/ is on the path)


class _Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scaling = 0.25
        self.attention_dropout = 0.0

    def forward(self, q, k, v):
        w = F.softmax((q @ k.transpose(-2, -1)) * self.scaling, dim=-1)
        w = F.dropout(w, p=self.attention_dropout, training=self.training)
        return w @ v


def test_a_float_attribute_is_guarded_not_left_to_pytorch():
    import flashgen

    calls: list = []
    op = recording_op(calls, lambda q, causal, args, kw: (args[0], kw.get("dropout_p", 0.0)))
    model = _Attention().train()
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=True, backend=flashgen.backend(op=op, fallback="eager"))
    for t in (7, 10):  # a new length: the same graph
        q, k, v = (torch.randn(2, 2, t, 16, requires_grad=True) for _ in range(3))
        got, want = compiled(q, k, v), model(q, k, v)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)
    assert calls == [(0.25, 0.0), (0.25, 0.0)], calls
    model.scaling, model.attention_dropout = 0.125, 0.3  # a recompile, with the new values
    calls.clear()
    q, k, v = (torch.randn(2, 2, 9, 16) for _ in range(3))
    compiled(q, k, v)
    assert calls == [(0.125, 0.3)], calls
    model.attention_dropout = 0.0
    calls.clear()
    torch.testing.assert_close(compiled(q, k, v), model(q, k, v), atol=2e-5, rtol=1e-4)
    assert calls == [(0.125, 0.0)], calls
