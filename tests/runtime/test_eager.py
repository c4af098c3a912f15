"""flashgen.runtime.eager: which calls skip the dispatcher, and that both paths agree."""

from __future__ import annotations

import pytest
import torch
from see_ops import SeeOps

import flashgen
from flashgen.runtime import autograd, composite, eager


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
    with SeeOps():
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


def test_the_environment_also_switches_off_plain_eager(monkeypatch):
    """FLASHGEN_DIRECT_OP=0 (read at import) sends the extras-free path through the ops too."""
    import importlib

    t = torch.zeros(2)
    monkeypatch.setenv(eager.ENV, "0")
    try:
        importlib.reload(eager)
        assert not eager.plain_eager(t)
    finally:
        monkeypatch.delenv(eager.ENV)
        importlib.reload(eager)
    assert eager.plain_eager(t)


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
    # every module that calls the primitives through `direct` gets the plain ops instead, and
    # the extras-free path (`composite._plain_attention`) sees no plain eager call
    monkeypatch.setattr(eager, "_CHECKS", None)
    for module in (autograd, composite):
        monkeypatch.setattr(module, "_fwd_op", torch.ops.flashgen.attention_fwd.default)
    monkeypatch.setattr(autograd, "_bwd_op", torch.ops.flashgen.attention_bwd.default)
    dispatched = run()
    for a, b in zip(direct, dispatched, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor, bias):
        ctx.factor = factor
        return x * factor + (0 if bias is None else bias)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None, grad


def test_function_apply_is_the_functions_apply():
    """Same output, same node type, same gradients as `Function.apply`."""
    apply = eager.function_apply(_Scale, (0, 2))
    assert apply is not _Scale.apply
    x = torch.randn(5, requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    out = apply(x, 3.0, b)
    assert type(out.grad_fn) is type(_Scale.apply(x, 3.0, b).grad_fn)
    gx, gb = torch.autograd.grad(out.sum(), (x, b))
    torch.testing.assert_close(gx, torch.full((5,), 3.0))
    torch.testing.assert_close(gb, torch.ones(5))
    torch.testing.assert_close(out, x * 3.0 + b)


def test_function_apply_leaves_functorch_and_setup_context_to_function_apply():
    class _WithSetup(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    assert eager.function_apply(_WithSetup, (0,)) == _WithSetup.apply
    apply = eager.function_apply(_Scale, (0, 2))
    # under a transform the class's own apply runs: it refuses a Function without
    # setup_context, exactly as `_Scale.apply` would
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: apply(x, 2.0, None).sum())(torch.randn(3))


def test_compiled_attention_with_grad_still_traces(monkeypatch):
    """Dynamo traces flashgen.attention(impl='flashgen') with inputs that require grad (it
    must see Function.apply, not the shortcut): fullgraph, right gradients."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, 33, 16, requires_grad=True) for _ in range(3))

    def fn(a, b, c):
        return flashgen.attention(a, b, c, causal=True, impl="flashgen")

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    out = compiled(q, k, v)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    want = fn(q, k, v)
    want_grads = torch.autograd.grad(want.sum(), (q, k, v))
    torch.testing.assert_close(out, want)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)
    torch._dynamo.reset()
