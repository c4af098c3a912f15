"""The `flashgen::attention*` custom ops: registration, fake impls, torch.compile.

What must hold: `torch.library.opcheck` passes (schema, fake impl, autograd registration,
AOT dispatch); compiled forward+backward equals eager bit for bit-ish; a function compiled with
`dynamic=True` is compiled once for several sequence lengths (the config lookup runs inside the
op at run time, with the concrete lengths).
"""

from __future__ import annotations

import pytest
import torch

import flashgen
from flashgen.ops import attention

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Importing Inductor trips torch's own deprecation of torch.jit.script_method: not ours.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method`:DeprecationWarning")


def qkv(sq, sk=None, *, d=32, hq=2, hkv=1, dtype=torch.float32, grad=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    sk = sq if sk is None else sk

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE).requires_grad_(grad)

    return rand(1, hq, sq, d), rand(1, hkv, sk, d), rand(1, hkv, sk, d)


def grads_of(fn, q, k, v, seed=1):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    gen = torch.Generator().manual_seed(seed)
    out.backward(torch.randn(out.shape, generator=gen).to(out.device, out.dtype))
    return out.detach(), [t.grad for t in leaves]


class CountingBackend:
    """A torch.compile backend that counts graph compilations, then hands off to Inductor."""

    def __init__(self):
        self.compiles = 0
        self.lengths = []  # the sequence length of each compilation's example q

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        self.compiles += 1
        tensors = [t for t in example_inputs if isinstance(t, torch.Tensor) and t.dim() == 4]
        self.lengths.append(int(tensors[0].shape[2]) if tensors else None)
        return compile_fx(gm, example_inputs)


def test_public_function_is_the_package_attribute():
    assert flashgen.attention is attention


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_opcheck_attention_fwd(causal):
    q, k, v = qkv(37, 21)
    torch.library.opcheck(torch.ops.flashgen.attention_fwd.default, (q, k, v, causal, 0.25))


@pytest.mark.parametrize(
    "needs", [(True, True, True), (False, True, False)], ids=["all", "dk-only"]
)
def test_opcheck_attention_bwd(needs):
    q, k, v = qkv(21, 37, grad=False)
    out, lse = torch.ops.flashgen.attention_fwd(q, k, v, True, 0.25)
    do = torch.randn_like(out)
    torch.library.opcheck(
        torch.ops.flashgen.attention_bwd.default, (do, q, k, v, out, lse, True, 0.25, *needs)
    )


def test_opcheck_composite_attention():
    q, k, v = qkv(21)
    torch.library.opcheck(torch.ops.flashgen.attention.default, (q, k, v, True, None))


def test_registered_op_matches_the_reference():
    """The op as a graph sees it (`torch.ops.flashgen.attention`, GQA, Sq != Sk, explicit
    scale) against the float64 reference."""
    from flashgen.kernels.reference import attention_ref

    q, k, v = qkv(37, 45, grad=False)
    out = torch.ops.flashgen.attention(q, k, v, True, 0.3)
    ref, _lse = attention_ref(q, k, v, causal=True, scale=0.3)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)


def test_primitives_are_not_differentiable_the_composite_is():
    """attention_fwd is a primitive without autograd of its own (its Autograd key falls
    through): differentiating goes through flashgen::attention / flashgen.attention."""
    q, k, v = qkv(21)
    out, lse = torch.ops.flashgen.attention_fwd(q, k, v, False, 0.25)
    assert not out.requires_grad and not lse.requires_grad
    assert torch.ops.flashgen.attention(q, k, v, False, 0.25).requires_grad
    assert attention(q, k, v).requires_grad
    with torch.no_grad():
        assert not attention(q, k, v).requires_grad


def test_validation_happens_before_the_op():
    q, k, v = qkv(8, d=8, grad=False)
    with pytest.raises(ValueError, match="head_dim"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="head_dim"):
        torch.ops.flashgen.attention(q, k, v, False, None)


def test_compile_fullgraph_matches_eager():
    """Inductor (the default backend), forward and backward, GQA + causal."""

    def fn(q, k, v):
        return attention(q, k, v, causal=True) * 2.0

    q, k, v = qkv(37, 45, hq=4, hkv=2)
    want_out, want_grads = grads_of(fn, q, k, v)
    got_out, got_grads = grads_of(torch.compile(fn, fullgraph=True), q, k, v)
    torch.testing.assert_close(got_out, want_out, rtol=0, atol=1e-6)
    for got, want in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def _via_op(q, k, v):
    return torch.ops.flashgen.attention(q, k, v, True, None).sin()


def _via_function(q, k, v):
    return attention(q, k, v, causal=True).sin()


@pytest.mark.parametrize("fn", [_via_op, _via_function], ids=["op", "function"])
def test_compile_dynamic_does_not_recompile_per_length(fn):
    """Three sequence lengths, one compilation, gradients right for each length."""
    backend = CountingBackend()

    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend=backend)
    for seq in (17, 40, 71):
        q, k, v = qkv(seq, seed=seq)
        want_out, want_grads = grads_of(fn, q, k, v)
        got_out, got_grads = grads_of(compiled, q, k, v)
        torch.testing.assert_close(got_out, want_out, rtol=1e-5, atol=1e-6)
        for got, want in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # Dynamo may restart its first analysis (a float default turned into a graph input) and
    # call the backend twice for the first length; no length after the first may compile.
    assert set(backend.lengths) == {17}, backend.lengths


def test_compiled_backward_skips_grads_not_needed():
    """Only v requires grad: the compiled graph still returns the right dv and nothing else."""

    def fn(q, k, v):
        return attention(q, k, v)

    q, k, v = qkv(21, grad=False)
    v.requires_grad_()
    out = torch.compile(fn, fullgraph=True)(q, k, v)
    out.sum().backward()
    v_eager = v.detach().clone().requires_grad_()
    attention(q, k, v_eager).sum().backward()
    assert q.grad is None and k.grad is None
    torch.testing.assert_close(v.grad, v_eager.grad, rtol=0, atol=1e-6)


def test_op_is_a_graph_rewrite_target():
    """What the compile backend does: swap SDPA nodes for `torch.ops.flashgen.attention.default`
    in the Dynamo graph, then hand the graph to Inductor; forward and backward must work."""
    import torch.nn.functional as F
    from torch._inductor.compile_fx import compile_fx

    swapped = []

    def rewrite_backend(gm, example_inputs):
        for node in list(gm.graph.nodes):
            if node.op == "call_function" and node.target is F.scaled_dot_product_attention:
                q, k, v = node.args[:3]
                args = (q, k, v, node.kwargs.get("is_causal", False), node.kwargs.get("scale"))
                with gm.graph.inserting_before(node):
                    new = gm.graph.call_function(torch.ops.flashgen.attention.default, args)
                node.replace_all_uses_with(new)
                gm.graph.erase_node(node)
                swapped.append(node.name)
        gm.recompile()
        return compile_fx(gm, example_inputs)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).relu()

    q, k, v = qkv(37, hkv=2)
    want_out, want_grads = grads_of(fn, q, k, v)
    got_out, got_grads = grads_of(torch.compile(fn, backend=rewrite_backend), q, k, v)
    assert swapped
    torch.testing.assert_close(got_out, want_out, rtol=1e-5, atol=1e-6)
    for got, want in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_under_autocast_the_operands_are_cast_as_sdpa_casts_them(compiled):
    """Under `torch.autocast` to float16 the function casts q, k and v as SDPA's are cast (q and
    k in float32 beside a float16 v, as rotary embeddings leave them, would otherwise be refused
    for their dtypes): a float16 output from flashgen's kernels matching float64 within
    float16's rounding, float32 gradients for the float32 inputs; under `torch.compile` too
    (fullgraph: the autocast check is traced)."""
    from flashgen.kernels.reference import attention_ref

    q, k, v = qkv(37, 45, hq=4, hkv=2)

    def fn(q, k, v):
        return attention(q, k, v.half(), causal=True, impl="flashgen")

    run = torch.compile(fn, fullgraph=True, backend="aot_eager") if compiled else fn
    torch._dynamo.reset()
    with torch.autocast(DEVICE, dtype=torch.float16):
        out = run(q, k, v)
    assert out.dtype == torch.float16
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    assert all(g.dtype == torch.float32 for g in grads)
    low = [t.detach().half().double().requires_grad_() for t in (q, k, v)]
    ref, _lse = attention_ref(*low, causal=True)
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
    for got, want in zip(grads, torch.autograd.grad(ref.sum(), low), strict=True):
        torch.testing.assert_close(got.double(), want, atol=1e-2, rtol=1e-2)
    with pytest.raises(ValueError, match="share one dtype"):
        fn(q, k, v)  # (without autocast the dtypes stay q's and k's float32 beside v's float16)
