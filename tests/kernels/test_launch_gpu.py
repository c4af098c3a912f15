"""The launch path on the GPU: direct launches and CUDA graphs (skipped without CUDA).

- A launch plan's direct launch (`flashgen.kernels.launch.FastLaunch`) gives bit for bit what the same
  plan gives through Triton's JIT, with new tensors and a new scale at every call, for the TMA
  and the pointer kernels, forward and backward; and it is really taken.
- Captured CUDA graphs (by hand, `torch.cuda.make_graphed_callables` for forward+backward, and
  `torch.compile` with `flashgen.backend(cudagraphs=True)`) replayed with new input values give
  what eager calls give; a plan first needed during a capture does not ask the database; the
  buffers the launchers keep are made outside any CUDA-graph pool.
"""

from __future__ import annotations

import copy

import pytest
import torch
import triton
from attention_blocks import GroupedSdpa
from test_window import band_ref

from flashgen.compile import patterns
from flashgen.core.config import TileConfig
from flashgen.kernels import bwd, fwd, launch, plans
from flashgen.kernels.launch import FastLaunch
from flashgen.kernels.reference import attention_ref
from flashgen.ops import attention
from flashgen.runtime import dispatch

pytestmark = [
    pytest.mark.gpu,
    # Importing Inductor trips torch's own deprecation of torch.jit.script_method: not ours.
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method`:DeprecationWarning"),
]
BF16 = torch.bfloat16
CFG = TileConfig(64, 64, 4, 2)


def rand(*shape, seed, grad=False):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=gen).to(BF16).cuda()
    return t.requires_grad_(grad)


def qkv(seed, *, b=2, hq=4, hkv=2, sq=300, sk=257, d=64, grad=False):
    return (
        rand(b, hq, sq, d, seed=seed, grad=grad),
        rand(b, hkv, sk, d, seed=seed + 100, grad=grad),
        rand(b, hkv, sk, d, seed=seed + 200, grad=grad),
    )


def _through_the_jit(monkeypatch):
    """Make every Launch take the JIT path (what it does while a launch hook is attached)."""
    monkeypatch.setattr(launch, "hooks_active", lambda: True)


@pytest.mark.parametrize("direct", ["raw", "compiled"])
@pytest.mark.parametrize("path", ["0", "1"], ids=["pointers", "tma"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_direct_launch_equals_the_jit(direct, path, causal, monkeypatch):
    monkeypatch.setenv("FLASHGEN_FWD_TMA", path)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", path)
    monkeypatch.setenv("FLASHGEN_DIRECT_LAUNCH", direct)
    plans.clear_all()
    q0, k0, v0 = qkv(0)
    fwd.forward(q0, k0, v0, causal=causal, scale=None, config=CFG)  # first call: the JIT
    q, k, v = qkv(1)  # new tensors, new values, same signature
    out, lse = fwd.forward(q, k, v, causal=causal, scale=0.11, config=CFG)
    again, _ = fwd.forward(q, k, v, causal=causal, scale=0.11, config=CFG)  # encoded maps reused
    assert torch.equal(out, again)
    do = rand(*out.shape, seed=3)
    (plan,) = fwd._plans.values()
    kind = launch.RawLaunch if direct == "raw" and triton.__version__.startswith("3.6") else None
    # the two-launch backward (the dQ kernel computes delta), then the three-launch one
    for own_delta, names in (("1", ("dq_delta", "dkdv")), ("0", ("pre", "dkdv", "dq"))):
        monkeypatch.setenv("FLASHGEN_BWD_OWN_DELTA", own_delta)
        bwd._plans.clear()
        grads = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=0.11, config=CFG)
        again = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=0.11, config=CFG)
        (bplan,) = bwd._plans.values()
        for run in (plan.run, *(getattr(bplan, name) for name in names)):
            assert isinstance(run.fast, kind or (launch.RawLaunch, FastLaunch))
            if direct == "compiled":
                assert isinstance(run.fast, FastLaunch)
        for got, want in zip(grads, again, strict=True):
            assert torch.equal(got, want)
    assert (plan.strides is None) == (path == "1")

    ref, _ = attention_ref(q, k, v, causal=causal, scale=0.11)
    assert (out.double() - ref).abs().max().item() < 2e-2

    _through_the_jit(monkeypatch)
    jit_out, jit_lse = fwd.forward(q, k, v, causal=causal, scale=0.11, config=CFG)
    jit_grads = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=0.11, config=CFG)
    assert torch.equal(out, jit_out) and torch.equal(lse, jit_lse)
    for got, want in zip(grads, jit_grads, strict=True):
        assert torch.equal(got, want)


def test_unaligned_inputs_stay_on_the_jit_and_are_right():
    """A q whose base is 2 bytes past a 16-byte boundary: Triton specialises pointers on
    alignment, so that plan never launches directly (and takes the pointer kernel)."""
    plans.clear_all()
    b, h, s, d = 1, 2, 130, 64
    buf = rand(b * h * s * d + 1, seed=4)
    q = buf[1:].view(b, h, s, d)
    _, k, v = qkv(5, b=b, hq=h, hkv=h, sq=s, sk=s, d=d)
    assert q.data_ptr() % 16 != 0
    for _ in range(2):
        out, _ = fwd.forward(q, k, v, causal=True, scale=None, config=CFG)
    (plan,) = fwd._plans.values()
    assert plan.run.fast is None and plan.strides is not None
    ref, _ = attention_ref(q, k, v, causal=True)
    assert (out.double() - ref).abs().max().item() < 2e-2


@pytest.mark.skipif(
    torch.cuda.get_device_capability() != (9, 0) if torch.cuda.is_available() else True,
    reason="the Hopper family needs an sm_90 GPU",
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_hopper_plan_launches_directly_and_equals_the_jit(causal, monkeypatch):
    """The Gluon forward's plan: after its first call through the JIT, the direct launcher,
    with new tensors (new descriptor addresses) and a new scale, bit for bit the JIT's result."""
    monkeypatch.setenv("FLASHGEN_FWD_FAMILY", "hopper")
    plans.clear_all()
    shape = dict(b=2, hq=8, hkv=2, sq=1000, sk=1000, d=128)
    fwd.forward(*qkv(20, **shape), causal=causal, scale=None)  # first call: the JIT
    for seed in (21, 22):
        q, k, v = qkv(seed, **shape)
        out, lse = fwd.forward(q, k, v, causal=causal, scale=0.07)
        ref, ref_lse = attention_ref(q, k, v, causal=causal, scale=0.07)
        assert (out.double() - ref).abs().max().item() < 2e-2
        assert (lse.double() - ref_lse).abs().max().item() < 1e-3
    (plan,) = fwd._plans.values()
    assert plan.hopper is not None
    kind = (
        launch.RawLaunch if triton.__version__.startswith("3.6") else (launch.RawLaunch, FastLaunch)
    )
    assert isinstance(plan.run.fast, kind)
    # a forward no backward follows writes its lse into the per-device scratch buffer
    no_lse, none = fwd.forward(q, k, v, causal=causal, scale=0.07, keep_lse=False)
    assert none is None and torch.equal(no_lse, out)
    _through_the_jit(monkeypatch)
    jit_out, jit_lse = fwd.forward(q, k, v, causal=causal, scale=0.07)
    assert torch.equal(out, jit_out) and torch.equal(lse, jit_lse)


@pytest.mark.parametrize("path", ["0", "1"], ids=["pointers", "tma"])
def test_window_sizes_of_one_signature_each_get_their_kernel(path, monkeypatch):
    """Triton compiles an int argument equal to 1 in as a constant: a plan first launched with a
    one-key window must not serve a later window size (`launch.value_classes` in the key)."""
    monkeypatch.setenv("FLASHGEN_FWD_TMA", path)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", path)
    plans.clear_all()
    q, k, v = qkv(30, sq=200, sk=200)
    do = rand(*q.shape, seed=31)
    for left in (1, 5, 16, 1, 37):
        out, lse = fwd.forward(q, k, v, causal=True, scale=0.125, config=CFG, window=(left, 0))
        ref = band_ref(q, k, v, causal=True, window=(left, 0), scale=0.125)
        assert (out.double() - ref).abs().max().item() < 2e-2, left
        dq, dk, dv = bwd.backward(
            do, q, k, v, out, lse, causal=True, scale=0.125, config=CFG, window=(left, 0)
        )
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        band_ref(qd, kd, vd, causal=True, window=(left, 0), scale=0.125).backward(do.double())
        for got, want in ((dq, qd.grad), (dk, kd.grad), (dv, vd.grad)):
            assert (got.double() - want).abs().max().item() < 5e-2, left


def _warm_up(fn, *args):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)


def test_captured_forward_replays_new_values():
    q, k, v = qkv(10)
    _warm_up(lambda: attention(q, k, v, causal=True))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = attention(q, k, v, causal=True)
    for seed in (11, 12):
        for static, new in zip((q, k, v), qkv(seed), strict=True):
            static.copy_(new)
        graph.replay()
        want = attention(*qkv(seed), causal=True)
        assert torch.equal(out, want)


def test_graphed_forward_and_backward():
    """torch.cuda.make_graphed_callables captures the forward and the backward graph."""

    def fn(q, k, v):
        return attention(q, k, v, causal=True, scale=0.2)

    graphed = torch.cuda.make_graphed_callables(fn, qkv(20, grad=True))
    for seed in (21, 22):
        inputs = qkv(seed, grad=True)
        do = rand(2, 4, 300, 64, seed=seed + 7)
        out = graphed(*inputs)
        got = torch.autograd.grad(out, inputs, do)
        eager_inputs = qkv(seed, grad=True)
        want_out = fn(*eager_inputs)
        want = torch.autograd.grad(want_out, eager_inputs, do)
        assert torch.equal(out, want_out)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)


def _forbid_database(monkeypatch):
    """From here on, a run-time choice starts from empty caches and fails the test if it asks
    the tuning database (what a CUDA graph capture must never do)."""
    dispatch.clear_cache()
    plans.clear_all()

    def no_query(key):
        raise AssertionError("the tuning database was asked during capture")

    monkeypatch.setattr(dispatch, "_miss", no_query)


def test_a_plan_first_needed_during_capture_skips_the_database(monkeypatch):
    from flashgen.core.spec import spec_for
    from flashgen.hardware.tiles import default_config

    q, k, v = qkv(30)
    config = default_config(spec_for(64, False, "bfloat16", "fwd"))
    want, _ = fwd.forward(q, k, v, causal=False, scale=None, config=config)  # compiles it
    _forbid_database(monkeypatch)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, _ = fwd.forward(q, k, v, causal=False, scale=None, config=dispatch.plan_config)
    assert not fwd._plans  # not kept: the next eager call resolves its config properly
    graph.replay()
    assert torch.equal(out, want)


def test_compiled_with_cudagraphs_matches_compiled_without():
    """backend(cudagraphs=True): Inductor captures the graphs (no cudagraph skip), forward and
    backward; results equal the same backend without CUDA graphs."""
    from torch._dynamo.utils import counters

    from flashgen.compile.backend import backend

    torch.manual_seed(0)
    model = GroupedSdpa(causal=True).cuda().to(BF16)  # causal GQA between two projections
    torch._dynamo.reset()
    counters.clear()
    before = sum(v for key, v in patterns.counters.items() if key.endswith(".replaced"))
    graphed = torch.compile(copy.deepcopy(model), backend=backend(cudagraphs=True))
    plain = torch.compile(copy.deepcopy(model), backend=backend())
    for seed in range(3):
        x = rand(2, 200, 256, seed=40 + seed)
        results = []
        for compiled in (graphed, plain):
            xi = x.clone().requires_grad_()
            out = compiled(xi)
            (grad,) = torch.autograd.grad(out.float().square().mean(), xi)
            results.append((out.detach().clone(), grad.clone()))  # graph outputs get reused
        (out_g, grad_g), (out_p, grad_p) = results
        torch.testing.assert_close(out_g, out_p)
        torch.testing.assert_close(grad_g, grad_p)
    replaced = sum(v for key, v in patterns.counters.items() if key.endswith(".replaced"))
    assert replaced - before == 2  # one site in each compiled model
    assert counters["inductor"]["cudagraph_skips"] == 0
    torch._dynamo.reset()


def test_compiled_with_cudagraphs_at_2k_then_without_grad():
    """backend(cudagraphs=True) at 2k tokens (where an H100 runs the Hopper family with its
    work-item counter), forward+backward then no-grad forwards, as a training loop's evaluation
    does: every call completes (a counter made during the trees' warm-up stopped HF Llama's
    first no-grad call, session 53) and matches the backend without CUDA graphs."""
    from flashgen.compile.backend import backend

    torch.manual_seed(1)
    model = GroupedSdpa(width=512, causal=True).cuda().to(BF16)
    torch._dynamo.reset()
    graphed = torch.compile(copy.deepcopy(model), backend=backend(cudagraphs=True))
    plain = torch.compile(copy.deepcopy(model), backend=backend())
    x = rand(2, 2048, 512, seed=60)
    for _ in range(2):
        results = []
        for compiled in (graphed, plain):
            torch.compiler.cudagraph_mark_step_begin()
            xi = x.clone().requires_grad_()
            out = compiled(xi)
            (grad,) = torch.autograd.grad(out.float().square().mean(), xi)
            results.append((out.detach().clone(), grad.clone()))
        torch.testing.assert_close(results[0], results[1])
    with torch.no_grad():
        for seed in range(3):
            x = rand(2, 2048, 512, seed=70 + seed)
            torch.compiler.cudagraph_mark_step_begin()
            out = graphed(x).clone()
            torch.testing.assert_close(out, plain(x))
    torch._dynamo.reset()


def test_kept_buffers_stay_out_of_a_graph_pool(monkeypatch):
    """The Hopper work-item counter and the no-grad forward's scratch lse, first needed while the
    thread's allocations go to a CUDA-graph pool (Inductor's CUDA-graph trees warming a graph
    up: no capture under way), are made outside that pool, and ready: the counter reads 0."""
    from types import SimpleNamespace

    from flashgen.kernels import hopper

    monkeypatch.setattr(fwd, "_scratch", {})
    monkeypatch.setattr(hopper, "_COUNTERS", {})  # (PyTorch's pooled streams recur: made anew)
    dev = torch.cuda.current_device()
    pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    q = torch.empty(1, device="cuda")
    with torch.cuda.stream(stream):
        torch._C._cuda_beginAllocateCurrentThreadToPool(dev, pool)
        try:
            inside = torch.empty(64, device="cuda")  # what the routing does to the rest
            counter = hopper.sched_counter(q.device)
            scratch = fwd._scratch_lse(SimpleNamespace(lse_numel=1, device=q.device), q)
        finally:
            torch._C._cuda_endAllocateToPool(dev, pool)
    only_inside = torch._C._cuda_checkPoolLiveAllocations(dev, pool, {inside.data_ptr()})
    del inside
    torch._C._cuda_releasePool(dev, pool)
    assert only_inside
    assert counter.item() == 0 and scratch.numel() == fwd.SCRATCH_FLOATS


@pytest.mark.impl_choice
def test_routing_during_capture_skips_the_database(monkeypatch):
    """flashgen.attention with the run-time implementation choice (impl=None), first called
    inside a capture: neither the implementation nor the config asks the database."""
    from flashgen.runtime import vendor

    q, k, v = qkv(50)
    _forbid_database(monkeypatch)
    # Warm up first, on a side stream, as PyTorch asks before any capture, with the choice a
    # capture makes (no database: the defaults): SDPA's cuDNN backend builds its graph for a
    # shape on its first call, which fails inside a capture (seen on the H200). Where the
    # defaults name flashgen (an H100), the kernel's launch plan is told so too: its config is
    # then the default, not the database's.
    capturing = vendor._capturing
    monkeypatch.setattr(vendor, "_capturing", lambda t: True)
    monkeypatch.setattr(plans, "capturing", lambda t: True)
    with torch.no_grad():
        _warm_up(lambda: attention(q, k, v, causal=True))
        want = attention(q, k, v, causal=True)
    monkeypatch.setattr(vendor, "_capturing", capturing)
    monkeypatch.setattr(plans, "capturing", launch.capturing)
    _forbid_database(monkeypatch)  # empty caches again: the capture makes the choice anew
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = attention(q, k, v, causal=True)
    graph.replay()
    torch.testing.assert_close(out, want)
    assert not dispatch._impls  # the capture-time choice was not kept


@pytest.mark.parametrize("path", ["0", "1"], ids=["pointers", "tma"])
def test_a_thread_whose_first_cuda_work_is_a_launch(path, monkeypatch):
    """A new thread has no current CUDA context until something binds one, and encoding a TMA
    descriptor (a driver call) does not: autograd's device thread meets this when flashgen's
    backward is the first node it runs. Forward and backward in fresh threads (new tensors, so
    new descriptors to encode) run and equal the same calls on this thread."""
    import threading

    monkeypatch.setenv("FLASHGEN_FWD_TMA", path)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", path)
    plans.clear_all()
    q, k, v = qkv(5)
    out, lse = fwd.forward(q, k, v, causal=True, scale=None, config=CFG)  # compiles here
    do = rand(*out.shape, seed=6)
    grads = bwd.backward(do, q, k, v, out, lse, causal=True, scale=0.125, config=CFG)
    found, errors = [], []

    def run(fn):
        def body():
            try:
                found.append(fn())
            except Exception as exc:  # re-raised on the test's thread below
                errors.append(exc)

        thread = threading.Thread(target=body)
        thread.start()
        thread.join()
        if errors:
            raise errors[0]
        return found.pop()

    q2, k2, v2 = (t.clone() for t in (q, k, v))  # new addresses
    out2, lse2 = run(lambda: fwd.forward(q2, k2, v2, causal=True, scale=None, config=CFG))
    torch.cuda.synchronize()
    assert torch.equal(out2, out) and torch.equal(lse2, lse)
    q3, k3, v3, do3 = (t.clone() for t in (q, k, v, do))
    grads3 = run(
        lambda: bwd.backward(do3, q3, k3, v3, out, lse, causal=True, scale=0.125, config=CFG)
    )
    torch.cuda.synchronize()
    for got, want in zip(grads3, grads, strict=True):
        assert torch.equal(got, want)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    public = attention(*leaves, causal=True, impl="flashgen")
    run(lambda: torch.autograd.grad(public, leaves, do))  # the engine's thread, as it starts
