"""The launch path's caches on the CPU: direct launches, launch plans, descriptors, input checks.

`FastLaunch` is checked against a stand-in for a Triton JIT function and its compiled kernel:
the argument list it hands the compiled kernel must be the one `JITFunction.run` hands it
(grid padded to three, stream, function, packed metadata, no launch metadata or hooks, then
every parameter with the constexprs last). The real direct launch runs on the GPU only
(tests/kernels/test_launch_gpu.py); in the interpreter every launch goes through the JIT.
"""

from __future__ import annotations

import pytest
import torch

from flashgen.core.config import TileConfig
from flashgen.core.spec import spec_for
from flashgen.kernels import bwd, fwd, launch, plans, tma
from flashgen.kernels.launch import FastLaunch, Launch
from flashgen.kernels.validate import check_inputs
from flashgen.runtime import dispatch

SMALL = TileConfig(32, 32, 4, 1)


class _Compiled:
    """Stands in for triton.compiler.CompiledKernel: records what its launcher is called with."""

    function = "function-handle"
    packed_metadata = "packed-metadata"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


class _Jit:
    """Stands in for a @triton.jit function: `jit[grid](*args, **kw)` records and returns the
    compiled kernel, as `JITFunction.run` does."""

    def __init__(self, arg_names, compiled):
        self.arg_names = arg_names
        self.compiled = compiled
        self.jit_calls = []

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.compiled

        return call


def test_fast_launch_passes_the_jits_argument_list(monkeypatch):
    """After one launch through the JIT, the compiled kernel's launcher gets exactly the list
    `JITFunction.run` gives it."""
    compiled = _Compiled()
    jit = _Jit(["x", "y", "n", "BLOCK_M", "BLOCK_N"], compiled)
    monkeypatch.setattr(launch, "raw_stream", lambda device: 1234)
    run = Launch(jit, (5, 2), {"BLOCK_M": 64, "BLOCK_N": 32}, {"num_warps": 4}, device=0)
    run("x0", "y0", 7)
    assert jit.jit_calls == [((5, 2), ("x0", "y0", 7), {"BLOCK_M": 64, "BLOCK_N": 32,
                                                          "num_warps": 4})]  # fmt: skip
    assert isinstance(run.fast, FastLaunch)  # not a Triton CudaLauncher: no RawLaunch
    run("x1", "y1", 9)
    assert compiled.calls == [
        (5, 2, 1, 1234, "function-handle", "packed-metadata", None, None, None,
         "x1", "y1", 9, 64, 32)
    ]  # fmt: skip
    assert len(jit.jit_calls) == 1


def test_direct_launch_declines_what_it_cannot_reproduce():
    compiled = _Compiled()
    # constexprs not last, in another order, or no compiled kernel (the interpreter): the JIT
    for names, constexprs, comp in [
        (["BLOCK_M", "x"], {"BLOCK_M": 16}, compiled),
        (["x", "B", "A"], {"A": 1, "B": 2}, compiled),
        (["x", "A"], {"A": 1}, None),
    ]:
        jit = _Jit(names, comp)
        run = Launch(jit, (1,), constexprs, {}, device=0)
        run("x")
        run("x")
        assert run.fast is None and len(jit.jit_calls) == 2


class _Tensor:
    """What RawLaunch reads of a descriptor's base: its address."""

    def __init__(self, address):
        self.address = address

    def data_ptr(self):
        return self.address


def test_raw_launch_expands_descriptors_once_per_address():
    """RawLaunch hands the C launch function what Triton 3.6's wrapper would: the base
    arguments, then each descriptor argument expanded by `make_tensordesc_arg`; the expansion
    is remembered per (slot, address)."""
    compiled = _Compiled()
    raw_calls, encoded = [], []

    def make_arg(desc, meta):
        encoded.append((desc.base.address, meta))
        return [f"map{desc.base.address}/{meta}", *desc.shape, *desc.strides]

    class _Launcher:
        launch_cooperative_grid, launch_pdl = False, True

    template = ([1, 2, 3, 4], [24, 12, 4, 1], [1, 1, 2, 4])
    descs = launch._Descriptors(((0, template), (2, template)))
    parts = (lambda *a: raw_calls.append(a), _Launcher(), {0: "m0", 2: "m2"}, make_arg)
    raw = launch.RawLaunch(compiled, parts, (7,), (64,), descs)
    a, b, c = _Tensor(4096), _Tensor(8192), _Tensor(12288)
    raw(55, (a, "lse", b, 3))
    raw(55, (a, "lse", c, 3))
    head = (7, 1, 1, 55, "function-handle", False, True, None, None, "packed-metadata", None,
            None, None)  # fmt: skip
    assert raw_calls == [
        (*head, "map4096/m0", 1, 2, 3, 4, 24, 12, 4, 1, "lse", "map8192/m2", 1, 2, 3, 4,
         24, 12, 4, 1, 3, 64),
        (*head, "map4096/m0", 1, 2, 3, 4, 24, 12, 4, 1, "lse", "map12288/m2", 1, 2, 3, 4,
         24, 12, 4, 1, 3, 64),
    ]  # fmt: skip
    assert encoded == [(4096, "m0"), (8192, "m2"), (12288, "m2")]  # a's map was reused
    with pytest.raises(ValueError, match="descriptor arguments"):
        launch.RawLaunch(compiled, parts, (7,), (64,), launch._Descriptors(((1, template),)))


def test_launch_uses_the_jit_once_then_the_direct_path(monkeypatch):
    compiled = _Compiled()
    jit = _Jit(["x", "A"], compiled)
    monkeypatch.setattr(launch, "raw_stream", lambda device: 100 + device)
    run = Launch(jit, (3,), {"A": 8}, {"num_warps": 2}, device=1)
    run("a")
    run("b")
    assert len(jit.jit_calls) == 1 and compiled.calls == [
        (3, 1, 1, 101, "function-handle", "packed-metadata", None, None, None, "b", 8)
    ]


def test_launch_goes_through_the_jit_while_a_hook_is_attached(monkeypatch):
    """A profiler's launch hook must see every launch, so hooks send calls back to the JIT."""
    from triton import knobs

    compiled = _Compiled()
    jit = _Jit(["x", "A"], compiled)
    monkeypatch.setattr(launch, "raw_stream", lambda device: 0)
    run = Launch(jit, (1,), {"A": 1}, {}, device=0)
    run("first")
    assert not launch.hooks_active()
    hook = knobs.runtime.launch_enter_hook
    if not hasattr(hook, "add"):
        pytest.skip("this Triton's launch hook is not a HookChain")
    seen = []
    hook.add(seen.append)
    try:
        assert launch.hooks_active()
        run("hooked")
    finally:
        hook.remove(seen.append)
    run("direct")
    assert [c[1] for c in jit.jit_calls] == [("first",), ("hooked",)]
    assert [c[-2] for c in compiled.calls] == ["direct"]


def test_launch_without_a_device_always_uses_the_jit():
    compiled = _Compiled()
    jit = _Jit(["x", "A"], compiled)
    run = Launch(jit, (1,), {"A": 1}, {}, device=None)
    run("a")
    run("b")
    assert len(jit.jit_calls) == 2 and compiled.calls == []


def test_direct_launches_can_be_switched_off(monkeypatch):
    t = torch.zeros(4)
    assert launch.direct_device(t, True) is None  # a CPU tensor: the interpreter
    monkeypatch.setenv("FLASHGEN_DIRECT_LAUNCH", "0")
    if torch.cuda.is_available():
        assert launch.direct_device(t.cuda(), True) is None


def _qkv(sq=40, d=32, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, sq, d, generator=gen).to(dtype).to(device) for _ in range(3))


def test_plans_are_reused_and_dropped_with_the_dispatch_cache(device):
    import flashgen.ops  # noqa: F401 - the op wires the launchers' plans to the dispatch cache

    q, k, v = _qkv(device=device)
    dispatch.clear_cache()
    first, _ = fwd.forward(q, k, v, causal=False, scale=None, config=SMALL)
    assert len(fwd._plans) == 1
    plan = next(iter(fwd._plans.values()))
    second, _ = fwd.forward(q, k, v, causal=False, scale=None, config=SMALL)
    assert next(iter(fwd._plans.values())) is plan and torch.equal(first, second)
    # in the interpreter every launch goes through the JIT; on a GPU the second one is direct
    assert (plan.run.fast is None) == (device == "cpu")
    out, lse = fwd.forward(q, k, v, causal=False, scale=None, config=SMALL)
    bwd.backward(torch.ones_like(out), q, k, v, out, lse, causal=False, scale=0.2, config=SMALL)
    assert fwd._plans and bwd._plans
    dispatch.clear_cache()
    assert not fwd._plans and not bwd._plans


def test_a_new_scale_reaches_the_kernel_through_a_cached_plan(device):
    from flashgen.kernels.reference import attention_ref

    q, k, v = _qkv(device=device)
    fwd.forward(q, k, v, causal=True, scale=0.5, config=SMALL)
    out, _ = fwd.forward(q, k, v, causal=True, scale=0.1, config=SMALL)
    ref, _ = attention_ref(q, k, v, causal=True, scale=0.1)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)


def test_the_tma_setting_is_read_at_every_call(monkeypatch, device):
    """Benchmarks switch FLASHGEN_FWD_TMA between calls: each value gets its own plan."""
    q, k, v = _qkv(dtype=torch.float16, device=device)
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "1")
    with_tma, _ = fwd.forward(q, k, v, causal=False, scale=None, config=SMALL)
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "0")
    pointers, _ = fwd.forward(q, k, v, causal=False, scale=None, config=SMALL)
    kernels = {plan.run.kernel.fn.__name__ for plan in fwd._plans.values()}
    assert {"attn_fwd", "attn_fwd_tma"} <= kernels
    torch.testing.assert_close(with_tma, pointers, atol=2e-3, rtol=0)


def test_env_reader_follows_os_environ(monkeypatch):
    read = tma.env_reader("FLASHGEN_TEST_ENV_READER")
    monkeypatch.delenv("FLASHGEN_TEST_ENV_READER", raising=False)
    assert read() is None
    monkeypatch.setenv("FLASHGEN_TEST_ENV_READER", "0")
    assert read() in ("0", b"0")
    assert not tma.use_tma("FLASHGEN_TEST_ENV_READER", (), forced=read())
    monkeypatch.setenv("FLASHGEN_TEST_ENV_READER", "1")
    assert tma.use_tma("FLASHGEN_TEST_ENV_READER", (), forced=read())


def test_descriptor_arguments_become_descriptors_on_the_jit_path():
    q = torch.zeros(1, 2, 40, 32)
    template = tma.descriptor_template(q, 16, 32)
    assert template == ([1, 2, 40, 32], [2560, 1280, 32, 1], [1, 1, 16, 32])
    descs = launch._Descriptors(((1, template),))
    args = descs.objects(("lse", q, 3))
    assert args[0] == "lse" and args[2] == 3
    assert args[1].base is q and args[1].block_shape == [1, 1, 16, 32]
    assert args[1].shape == template[0] and args[1].strides == template[1]


def test_capture_time_choice_skips_the_database(monkeypatch):
    """During CUDA-graph capture the launchers pass query_db=False: no query, nothing cached."""
    from flashgen.hardware.tiles import default_config

    spec = spec_for(64, True, "float16", "fwd")
    dispatch.clear_cache()

    def no_query(key):
        raise AssertionError("the database was asked during capture")

    monkeypatch.setattr(dispatch, "_miss", no_query)
    assert dispatch.choose_config(spec, 300, 300, query_db=False) == default_config(spec)
    assert dispatch.source_of(spec, 300, 300) is None


def test_checked_signatures_are_remembered_but_never_widen():
    q, k, v = _qkv(dtype=torch.float16)
    assert check_inputs(q, k, v, causal=True, scale=None) == pytest.approx(32**-0.5)
    assert check_inputs(q, k, v, causal=True, scale=0.25) == 0.25
    assert check_inputs(q, k, v, causal=True, scale=None) == pytest.approx(32**-0.5)
    # same shapes, other types: still refused although a True / 0.25 entry exists
    with pytest.raises(ValueError, match="causal must be a bool"):
        check_inputs(q, k, v, causal=1, scale=None)
    with pytest.raises(ValueError, match="scale must be a positive float"):
        check_inputs(q, k, v, causal=True, scale=True)
    with pytest.raises(ValueError, match="share one dtype"):
        check_inputs(q, k.float(), v, causal=True, scale=None)
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        check_inputs(q.transpose(2, 3).contiguous().transpose(2, 3), k, v, causal=True, scale=None)
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        check_inputs(q.tolist(), k, v, causal=True, scale=None)


def test_cudagraphs_needs_inductor():
    from flashgen.compile.backend import backend

    with pytest.raises(ValueError, match="cudagraphs=True needs fallback='inductor'"):
        backend(cudagraphs=True, fallback="eager")


def test_plans_on_unsettled_configs_are_not_kept(monkeypatch):
    """A config the dispatcher may still change (a fallback held during a database fault) must
    not be frozen into a launch plan."""
    q, k, v = _qkv()
    dispatch.clear_cache()
    plans.clear_all()
    monkeypatch.setattr(dispatch, "settled", lambda spec, sq, sk: False)
    fwd.forward(q, k, v, causal=False, scale=None, config=dispatch.plan_config)
    assert not fwd._plans
    monkeypatch.undo()
    fwd.forward(q, k, v, causal=False, scale=None, config=dispatch.plan_config)
    assert fwd._plans  # with no database fault the choice is cached, so is the plan


def test_raw_launch_remembers_a_leading_descriptor_prefix_per_addresses(monkeypatch):
    """Descriptors at the leading positions (the forward's q, k, v, out): the expanded prefix is
    remembered per tuple of base addresses and the rest of the arguments follow it as given."""
    compiled = _Compiled()
    raw_calls, encoded = [], []

    def make_arg(desc, meta):
        encoded.append(desc.base.address)
        return [f"map{desc.base.address}", *desc.shape]

    class _Launcher:
        launch_cooperative_grid, launch_pdl = False, False

    template = ([1, 2], [2, 1], [1, 2])
    descs = launch._Descriptors(((0, template), (1, template)))
    parts = (lambda *a: raw_calls.append(a), _Launcher(), {0: "m", 1: "m"}, make_arg)
    monkeypatch.setattr(launch, "MAX_PREFIXES", 2)
    raw = launch.RawLaunch(compiled, parts, (3, 2), (16,), descs)
    a, b, c = _Tensor(4096), _Tensor(8192), _Tensor(12288)
    raw(9, (a, b, "lse", 5))
    raw(9, (a, b, "lse2", 6))  # same addresses: nothing encoded again
    raw(9, (a, c, "lse", 7))
    raw(9, (c, a, "lse", 8))  # a third prefix: the remembered ones start over
    head = (3, 2, 1, 9, "function-handle", False, False, None, None, "packed-metadata", None,
            None, None)  # fmt: skip
    assert raw_calls == [
        (*head, "map4096", 1, 2, "map8192", 1, 2, "lse", 5, 16),
        (*head, "map4096", 1, 2, "map8192", 1, 2, "lse2", 6, 16),
        (*head, "map4096", 1, 2, "map12288", 1, 2, "lse", 7, 16),
        (*head, "map12288", 1, 2, "map4096", 1, 2, "lse", 8, 16),
    ]  # fmt: skip
    # per-address encodings are still shared across prefixes (slot 0 saw 4096 then 12288)
    assert encoded == [4096, 8192, 12288, 12288, 4096]
    assert len(raw._prefixes) == 1


@pytest.mark.impl_choice
def test_capture_time_implementation_choice_skips_the_database(monkeypatch):
    """impl_choice(query_db=False): no query, the defaults' answer, nothing cached; a callable
    query_db is asked only on a miss."""
    from flashgen.core.impls import default_impl

    spec = spec_for(64, True, "float16", "bwd")
    dispatch.clear_cache()

    def no_query(key):
        raise AssertionError("the database was asked during capture")

    monkeypatch.setattr(dispatch, "_miss", no_query)
    impl, ratio, source = dispatch.impl_choice(spec, 300, 300, False, query_db=False)
    assert (impl, ratio, source) == (default_impl(None, "float16"), None, "default")
    assert not dispatch._impls  # not cached: the next ordinary call asks the database
    asked = []
    assert dispatch.choose_impl(spec, 300, 300, False, query_db=lambda: asked.append(1) or False)
    assert asked == [1]
    dispatch.clear_cache()


def test_raw_launch_passes_other_tensors_as_addresses():
    """Tensors after the descriptor prefix (and in a launch without descriptors) reach the C
    function as their addresses; positions are read from the first call."""
    compiled = _Compiled()
    raw_calls = []

    class _Launcher:
        launch_cooperative_grid, launch_pdl = False, False

    lse, delta = torch.zeros(3), torch.zeros(5)
    parts = (lambda *a: raw_calls.append(a), _Launcher(), {}, None)
    plain = launch.RawLaunch(compiled, parts, (2,), (), launch._Descriptors(()))
    plain(1, (lse, 7, delta, 0.5))
    plain(1, (delta, 8, lse, 0.25))
    tails = [call[13:] for call in raw_calls]
    assert tails == [
        (lse.data_ptr(), 7, delta.data_ptr(), 0.5),
        (delta.data_ptr(), 8, lse.data_ptr(), 0.25),
    ]

    def make_arg(desc, meta):
        return [f"map{desc.base.address}"]

    template = ([1, 2], [2, 1], [1, 2])
    parts = (lambda *a: raw_calls.append(a), _Launcher(), {0: "m"}, make_arg)
    lead = launch.RawLaunch(compiled, parts, (2,), (16,), launch._Descriptors(((0, template),)))
    lead(1, (_Tensor(4096), lse, 3))
    assert raw_calls[-1][13:] == ("map4096", lse.data_ptr(), 3, 16)


def test_value_classes_are_what_triton_specialises_on():
    t = torch.zeros(8, dtype=torch.float16)
    assert launch.value_classes(1, 5, 32, None) == (
        (True, False),
        (False, False),
        (False, True),
        None,
    )
    assert launch.value_classes((1, 0), t, t[1:]) == (((True, False), (False, True)), True, False)
    with pytest.raises(TypeError):
        launch.value_classes(0.5)  # floats are not specialised: a caller passing one is wrong


def test_forward_plans_split_on_the_window_sizes_classes():
    """A window of 1 key gets a plan of its own (Triton compiles the 1 in), sizes of one class
    share one, and a size past both lengths is clamped before it is classed; a band narrower
    than the keys (and at most hopper.NARROW_WINDOW keys) is planned apart from a wider one of
    its class (the Hopper family runs it on other tiles)."""
    plans.clear_all()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, 16, generator=gen) for _ in range(3))
    for left in (1, 5, 3, 1, 10_000, 80, 32):
        fwd.forward(q, k, v, causal=True, scale=None, config=SMALL, window=(left, 0))
    # (1) | (5, 3) | 10_000 -> 80 and 80 (multiples of 16, as wide as the keys) | 32 (narrow)
    assert len(fwd._plans) == 4


def test_a_descriptor_launch_without_a_cuda_context_binds_one_and_retries(monkeypatch):
    """Triton's descriptor encoding fails on a thread without a current CUDA context
    ("invalid device context"); the launch then binds the device's context
    (`launch.bind_context`) and launches once more. Any other error, or the same one again,
    is raised; a launch without descriptors never retries."""
    bound = []
    monkeypatch.setattr(launch, "bind_context", lambda: bound.append(True))
    monkeypatch.setattr(launch, "raw_stream", lambda device: 0)
    monkeypatch.setattr(launch, "hooks_active", lambda: False)
    template = ([4, 8], [8, 1], [4, 8])

    def plan(errors, descs=((0, template),)):
        attempts = []

        def fast(stream, args):
            attempts.append(args)
            if errors:
                raise errors.pop(0)

        run = launch.Launch(None, (1,), {}, {}, 0, descs)
        run.fast = fast
        return run, attempts

    no_context = RuntimeError(f"Triton Error [CUDA]: ...: {launch.NO_CONTEXT}")
    run, attempts = plan([no_context])
    run("a", 1)
    assert attempts == [("a", 1), ("a", 1)] and bound == [True]
    bound.clear()
    run, attempts = plan([RuntimeError("out of resources")])
    with pytest.raises(RuntimeError, match="out of resources"):
        run("a", 1)
    assert len(attempts) == 1 and not bound
    run, attempts = plan([no_context, no_context])
    with pytest.raises(RuntimeError, match=launch.NO_CONTEXT):
        run("a", 1)
    assert len(attempts) == 2 and bound == [True]
    bound.clear()
    run, attempts = plan([no_context], descs=())
    with pytest.raises(RuntimeError, match=launch.NO_CONTEXT):
        run("a", 1)
    assert len(attempts) == 1 and not bound
