"""flashgen.runtime.eager: which calls skip the dispatcher, and that both paths agree."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import flashgen
from flashgen import ops
from flashgen.runtime import eager


class _Recorder:
    """An op and a kernel that say which of them ran."""

    def __init__(self):
        self.ran = []

    def op(self, *args):
        self.ran.append("op")
        return args

    def kernel(self, *args):
        self.ran.append("kernel")
        return args


class _SeeOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_plain_eager_calls_the_kernel_itself():
    rec = _Recorder()
    call = eager.direct(rec.op, rec.kernel)
    t = torch.zeros(2)
    assert call(t, 1, "x") == (t, 1, "x")
    assert rec.ran == ["kernel"]
    assert eager.plain_eager(t)


def test_a_dispatch_mode_sees_the_op():
    rec = _Recorder()
    call = eager.direct(rec.op, rec.kernel)
    with _SeeOps():
        assert not eager.plain_eager(torch.zeros(2))
        call(torch.zeros(2))
    assert rec.ran == ["op"]


def test_subclass_and_fake_tensors_go_through_the_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    rec = _Recorder()
    call = eager.direct(rec.op, rec.kernel)
    call(torch.nn.Parameter(torch.zeros(2)))  # a Tensor subclass
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.zeros(2))
    call(fake)
    assert rec.ran == ["op", "op"]


def test_functorch_transforms_and_the_profiler_go_through_the_op():
    rec = _Recorder()
    call = eager.direct(rec.op, rec.kernel)

    def body(x):
        call(x)
        return x.sum()

    torch.func.grad(body)(torch.zeros(2))
    with torch.autograd.profiler.profile():
        call(torch.zeros(2))
    assert rec.ran == ["op", "op"]


def test_switched_off_by_the_environment(monkeypatch):
    rec = _Recorder()
    monkeypatch.setenv(eager.ENV, "0")
    assert eager.direct(rec.op, rec.kernel) == rec.op


def test_a_traced_call_records_the_op(monkeypatch):
    """make_fx (what AOTAutograd builds on) sees flashgen's op, not its Python body."""
    from torch.fx.experimental.proxy_tensor import make_fx

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q, k, v = (torch.randn(1, 2, 17, 16) for _ in range(3))
    graph = make_fx(lambda a, b, c: flashgen.attention(a, b, c, impl="flashgen"))(q, k, v)
    targets = {str(n.target) for n in graph.graph.nodes if n.op == "call_function"}
    assert "flashgen.attention_fwd.default" in targets


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_direct_and_dispatched_calls_agree(causal, monkeypatch):
    """The same forward and gradients whether the primitives run directly or through the
    dispatcher (interpreter kernels, fp32, odd length)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 16, requires_grad=True) for _ in range(3))
    do = torch.randn(1, 2, 37, 16)

    def run():
        out = flashgen.attention(q, k, v, causal=causal, impl="flashgen")
        return (out.detach(), *torch.autograd.grad(out, (q, k, v), do))

    direct = run()
    monkeypatch.setattr(ops, "_fwd_op", torch.ops.flashgen.attention_fwd.default)
    monkeypatch.setattr(ops, "_bwd_op", torch.ops.flashgen.attention_bwd.default)
    dispatched = run()
    for a, b in zip(direct, dispatched, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
