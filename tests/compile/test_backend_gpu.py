"""The "flashgen" backend on the GPU with real bf16 kernels (skipped without CUDA).

The CPU tests (test_backend.py) run tiny float32 models through the interpreter; here the same
path compiles real-width blocks (head dim 64 and 128, odd sequence lengths, grouped-query
attention) in bf16 and checks output and input gradient against a float32 copy of the same
model. The bound is relative to what eager bf16 itself gets wrong against that float32 copy: a
replaced attention may not be much worse than the model it replaces.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from attention_blocks import GroupedSdpa

from flashgen.compile import patterns
from flashgen.compile.backend import backend

pytestmark = pytest.mark.gpu


class HandWritten(nn.Module):
    """Hand-written causal attention (matmul, tril mask, softmax in float32, matmul)."""

    def __init__(self, width: int, head_dim: int):
        super().__init__()
        self.h, self.d = width // head_dim, head_dim
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = F.softmax(s.float(), dim=-1).to(q.dtype) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def _replaced() -> int:
    return sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))


def _run(model, x):
    x = x.clone().requires_grad_()
    out = model(x)
    (grad,) = torch.autograd.grad(out.float().square().mean(), x)
    return out.float(), grad.float()


@pytest.mark.parametrize(
    "make, head_dim, t",
    [
        (HandWritten, 64, 333),
        (HandWritten, 128, 1000),
        (GroupedSdpa, 64, 517),
        (GroupedSdpa, 128, 257),
    ],
)
def test_bf16_block_on_gpu_matches_float32_model(make, head_dim, t):
    torch.manual_seed(0)
    width = 8 * head_dim
    ref = make(width, head_dim).cuda()
    eager = copy.deepcopy(ref).to(torch.bfloat16)
    x = torch.randn(2, t, width, device="cuda")
    want, want_grad = _run(ref, x)
    eager_out, eager_grad = _run(eager, x.bfloat16())

    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(eager), backend=backend())
    before = _replaced()
    got, got_grad = _run(compiled, x.bfloat16())
    assert _replaced() - before == 1

    for ours, theirs, exact in ((got, eager_out, want), (got_grad, eager_grad, want_grad)):
        assert torch.isfinite(ours).all()
        scale = exact.abs().max().item()
        eager_err = (theirs - exact).abs().max().item()
        our_err = (ours - exact).abs().max().item()
        assert our_err <= 2 * eager_err + 1e-3 * scale, (our_err, eager_err, scale)
