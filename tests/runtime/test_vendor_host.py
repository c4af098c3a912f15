"""The routed call's host path: SDPA's backend chosen through its flag functions (not the
`sdpa_kernel` context manager) and the implementation choice remembered per exact call sizes.

Both are shortcuts on every default call that runs an SDPA backend, so what they must keep is
what the slow path did: the same output, the same backend and nothing else enabled during the
call, the user's flags restored afterwards (also when the backend refuses), and no choice
remembered that the run-time choice itself would still revise.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from flashgen.core.spec import KernelSpec
from flashgen.runtime import dispatch, vendor

pytestmark = pytest.mark.impl_choice

FLAGS = {
    "flash": torch.backends.cuda.flash_sdp_enabled,
    "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
    "math": torch.backends.cuda.math_sdp_enabled,
    "cudnn": torch.backends.cuda.cudnn_sdp_enabled,
}


def _flags() -> dict[str, bool]:
    return {name: get() for name, get in FLAGS.items()}


def _inputs(gqa: bool = True):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 37, 32, generator=gen)
    k, v = (torch.randn(1, 2 if gqa else 4, 37, 32, generator=gen) for _ in range(2))
    return q, k, v


@pytest.fixture
def choice(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHGEN_SHIPPED_DIR", str(tmp_path / "no-shipped"))
    monkeypatch.delenv("FLASHGEN_IMPL", raising=False)
    dispatch.set_db(f"sqlite:///{tmp_path / 'host.sqlite3'}")
    dispatch.set_impl(None)
    yield
    dispatch.set_db(None)
    dispatch.set_impl(None)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sdpa_runs_only_the_named_backend_and_restores_the_flags(monkeypatch, causal):
    q, k, v = _inputs()
    want = None
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):  # the slow path this replaces
        want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    seen = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(_flags())
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.backends.cuda.enable_math_sdp(False)  # a user's own setting, to be restored
    try:
        before = _flags()
        got = vendor.sdpa(q, k, v, causal=causal, scale=32**-0.5, impl="sdpa_flash")
        assert _flags() == before
    finally:
        torch.backends.cuda.enable_math_sdp(True)
    assert seen == [{"flash": True, "efficient": False, "math": False, "cudnn": False}]
    assert torch.equal(got, want)


def test_a_refusing_backend_raises_and_still_restores_the_flags():
    q, k, v = _inputs()
    before = _flags()
    with pytest.raises(RuntimeError):  # no cuDNN kernel for CPU tensors
        vendor.sdpa(q, k, v, causal=False, scale=0.2, impl="sdpa_cudnn")
    assert _flags() == before


def test_every_flag_sdpa_kernel_sets_is_switched():
    """The flag list comes from torch's own `sdpa_kernel` table: one getter and setter each,
    and exactly one flag on for each SDPA implementation."""
    from torch.nn import attention

    gets, sets = vendor._switches()
    assert len(gets) == len(sets) == len(attention._backend_names)
    for impl in ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"):
        assert sum(vendor._only_backend(impl)) == 1


def test_the_choice_is_remembered_per_size_and_forgotten_with_the_cache(choice):
    q, k, v = _inputs()
    dispatch.set_impl("sdpa_flash")
    assert vendor.winner(q, k, v, False, False) == "sdpa_flash"
    key = (1, 4, 37, 37, 32, False, torch.float32, False, False)
    assert dispatch.settled_impls == {key: "sdpa_flash"}
    dispatch.set_impl("flashgen")  # forcing another implementation forgets it
    assert dispatch.settled_impls == {}
    assert vendor.winner(q, k, v, False, False) == "flashgen"
    assert vendor.winner(q, k, v, False, True) == "flashgen"
    assert len(dispatch.settled_impls) == 2  # forward and backward calls apart
    dispatch.clear_cache()
    assert dispatch.settled_impls == {}


def test_a_choice_not_cached_for_good_is_not_remembered(choice):
    """A capture-time answer (no database asked) is not kept by the run-time choice; the
    remembered table must not keep it either."""
    spec = KernelSpec(32, False, "float32", "fwd")
    key = ("a caller's key",)
    assert dispatch.remember_impl(key, spec, 37, 37, False, query_db=False) == "flashgen"
    assert dispatch.settled_impls == {}
    assert dispatch.remember_impl(key, spec, 37, 37, False) == "flashgen"
    assert dispatch.settled_impls == {key: "flashgen"}


def test_launch_bound_is_small_cuda_work_only():
    from types import SimpleNamespace as T

    q = T(is_cuda=True, shape=(1, 16, 512, 64))
    assert vendor.launch_bound(q, T(shape=(1, 4, 512, 64)))
    assert not vendor.launch_bound(q, T(shape=(1, 4, 513, 64)))
    assert not vendor.launch_bound(T(is_cuda=False, shape=(1, 1, 8, 8)), T(shape=(1, 1, 8, 8)))


def test_a_launch_bound_call_runs_sdpas_own_choice(choice, monkeypatch):
    """The choice names an SDPA backend, but the call is launch-bound: SDPA runs with the
    user's flags untouched (no backend forced); a forced impl= is still forced."""
    import flashgen

    monkeypatch.setattr(vendor, "launch_bound", lambda q, k: True)
    dispatch.set_impl("sdpa_flash")
    seen, forced = [], []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(_flags())
        return real(*args, **kwargs)

    real_sdpa = vendor.sdpa
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(
        vendor, "sdpa", lambda *a, **kw: forced.append(kw["impl"]) or real_sdpa(*a, **kw)
    )
    q, k, v = _inputs()
    user = _flags()
    out = flashgen.attention(q, k, v, causal=True)
    assert forced == [] and seen == [user]
    torch.testing.assert_close(out, real(q, k, v, is_causal=True, enable_gqa=True))
    flashgen.attention(q, k, v, causal=True, impl="sdpa_flash")
    assert forced == ["sdpa_flash"]


def test_a_launch_bound_signature_goes_to_sdpa_at_once(choice, monkeypatch):
    """After `route` sent a launch-bound auto call to SDPA's own choice, the next call with the
    same signature goes there without the checks or the choice: same output, and `route`
    (and `check_inputs`) asked again for a new signature, a gradient wanted, a forced impl=,
    under a dispatch mode, and after the run-time choice's caches were emptied. Inputs the
    checks refuse still raise their ValueError."""
    import flashgen
    from flashgen.runtime import composite

    monkeypatch.setattr(vendor, "launch_bound", lambda q, k: True)
    dispatch.set_impl("sdpa_flash")
    routed, checked = [], []
    real_route, real_check = composite.route, composite.check_inputs
    monkeypatch.setattr(
        composite, "route", lambda *a, **kw: routed.append(1) or real_route(*a, **kw)
    )
    monkeypatch.setattr(
        composite, "check_inputs", lambda *a, **kw: checked.append(1) or real_check(*a, **kw)
    )
    q, k, v = _inputs()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    for _ in range(3):
        torch.testing.assert_close(flashgen.attention(q, k, v, causal=True), want)
    assert len(routed) == 1 and len(checked) == 1
    flashgen.attention(q, k, v, causal=False)  # another signature
    flashgen.attention(q, k, v, causal=False)
    assert len(routed) == 2
    flashgen.attention(q, k, v, causal=True, scale=0.5)  # another scale
    assert len(routed) == 3
    qg = q.clone().requires_grad_()
    out = flashgen.attention(qg, k, v, causal=True)  # a gradient wanted: its own key
    assert len(routed) == 4 and out.requires_grad
    flashgen.attention(q, k, v, causal=True, impl="sdpa_flash")  # forced: always routed
    assert len(routed) == 5
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passing():
        flashgen.attention(q, k, v, causal=True)
    assert len(routed) == 6
    dispatch.clear_cache()
    dispatch.set_impl("sdpa_flash")
    flashgen.attention(q, k, v, causal=True)
    assert len(routed) == 7
    with pytest.raises(ValueError, match="q must be 4-D"):
        flashgen.attention(q[0], k, v, causal=True)
    with pytest.raises(ValueError, match="head_dim"):
        flashgen.attention(q, k[..., :16], v[..., :16], causal=True)


def test_a_launch_bound_forward_alone_runs_flashgens_forward(choice, monkeypatch):
    """The run-time choice names an SDPA backend (not forced) and the call is launch-bound: a
    forward alone runs flashgen's forward (its host path costs what SDPA's does), and the next
    call of the signature goes there without `route`; with a gradient wanted, with a query
    short enough for the decode kernels, or with an SDPA backend forced for the process, SDPA's
    own choice runs as before. Outputs match SDPA's."""
    import flashgen
    from flashgen.runtime import composite

    monkeypatch.setattr(vendor, "launch_bound", lambda q, k: True)
    monkeypatch.setattr(vendor, "winner", lambda *a, **kw: "sdpa_flash")
    routed, ours, theirs = [], [], []
    real_route, real_plain, real_sdpa = (
        composite.route,
        composite.plain_forward,
        F.scaled_dot_product_attention,
    )
    monkeypatch.setattr(
        composite, "route", lambda *a, **kw: routed.append(1) or real_route(*a, **kw)
    )
    monkeypatch.setattr(
        composite, "plain_forward", lambda *a, **kw: ours.append(1) or real_plain(*a, **kw)
    )
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda *a, **kw: theirs.append(1) or real_sdpa(*a, **kw)
    )
    q, k, v = _inputs()
    want = real_sdpa(q, k, v, is_causal=True, enable_gqa=True)
    for _ in range(3):
        torch.testing.assert_close(flashgen.attention(q, k, v, causal=True), want)
    assert (len(routed), len(ours), len(theirs)) == (1, 3, 0)
    qg = q.clone().requires_grad_()
    torch.testing.assert_close(flashgen.attention(qg, k, v, causal=True), want)
    assert (len(routed), len(ours), len(theirs)) == (2, 3, 1)  # a backward follows: SDPA
    short = q[:, :, :1]
    torch.testing.assert_close(
        flashgen.attention(short, k, v), real_sdpa(short, k, v, enable_gqa=True)
    )
    assert (len(routed), len(ours), len(theirs)) == (3, 3, 2)  # a decode step: SDPA
    dispatch.set_impl("sdpa_flash")  # forced for the process (and the caches emptied): SDPA
    torch.testing.assert_close(flashgen.attention(q, k, v, causal=True), want)
    assert (len(routed), len(ours), len(theirs)) == (4, 3, 3)
    dispatch.set_impl(None)
    torch.testing.assert_close(flashgen.attention(q, k, v, causal=True), want)
    assert (len(routed), len(ours), len(theirs)) == (5, 4, 3)  # routed again after the clear


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_a_launch_bound_forward_alone_runs_flashgens_kernel(choice, monkeypatch, causal):
    """On the GPU, whatever this GPU's defaults name: a launch-bound eager forward without a
    gradient runs flashgen's forward (and again at once for its signature), one with a
    gradient wanted does not where the defaults name an SDPA backend; outputs match SDPA's."""
    import flashgen
    from flashgen.core import impls
    from flashgen.hardware.sram import current_device
    from flashgen.runtime import composite

    ours = []
    real_plain = composite.plain_forward
    monkeypatch.setattr(
        composite, "plain_forward", lambda *a, **kw: ours.append(1) or real_plain(*a, **kw)
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(1, 2, 128, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
        for _ in range(3)
    )
    assert vendor.launch_bound(q, k)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(2):
        with torch.no_grad():
            out = flashgen.attention(q, k, v, causal=causal)
        torch.testing.assert_close(out, want, atol=2e-2, rtol=2e-2)
    assert len(ours) == 2
    qg = q.clone().requires_grad_()
    out = flashgen.attention(qg, k, v, causal=causal)
    torch.testing.assert_close(out.detach(), want, atol=2e-2, rtol=2e-2)
    if impls.default_impl(current_device().name, "bfloat16") != "flashgen":
        assert len(ours) == 2  # SDPA's own choice, as before


def test_gain_is_the_calls_estimated_time_times_the_margin():
    """1x1x1024x1024, head dim 128: 2^29 FLOPs forward; half of it causal, 3.5x with a backward."""
    work = (1, 1, 1024, 1024, 128)
    full = 4 * 1024 * 1024 * 128 / vendor.ATTENTION_FLOPS_PER_S
    assert vendor.gain_s(work, False, False, 2.0) == pytest.approx(full / 2)
    assert vendor.gain_s(work, True, False, 2.0) == pytest.approx(full / 4)
    assert vendor.gain_s(work, False, True, 1.25) == pytest.approx(full * 3.5 * 0.2)
    assert vendor.gain_s(work, False, False, 1.0) == 0.0


class _Cuda:
    """Stands for a CUDA tensor in `vendor.winner` (only its sizes, dtype and is_cuda are read)."""

    def __init__(self, *shape):
        self.shape, self.dtype, self.is_cuda = shape, torch.bfloat16, True


@pytest.mark.parametrize(
    ("shape", "ratio", "source", "want"),
    [
        # the Llama block's attention: ~57 µs of GPU time, a 1.06x record saves ~3 µs
        ((4, 16, 2048, 64), 1.06, "shipped", "sdpa_cudnn"),
        # 16 x 16 x 1k, head dim 128, causal: ~98 µs; a 1.15x record saves ~13 µs, past the
        # forward's 10 µs margin (under the 50 µs of a call with a backward)
        ((16, 16, 1024, 128), 1.15, "shipped", "flashgen"),
        # the same record on a quarter of the batch: ~3 µs, under it
        ((4, 16, 1024, 128), 1.15, "shipped", "sdpa_cudnn"),
        # 1 x 16 x 16k, head dim 128: ~3 ms, 1.10x saves ~0.3 ms
        ((1, 16, 16384, 128), 1.10, "shipped", "flashgen"),
        # forced, or a choice without a comparison: never second-guessed
        ((4, 16, 2048, 64), 1.06, "forced", "flashgen"),
        ((4, 16, 2048, 64), None, "default", "flashgen"),
    ],
)
def test_flashgen_wins_only_where_it_saves_more_than_its_host_time(
    monkeypatch, shape, ratio, source, want
):
    monkeypatch.setattr(vendor, "remember_impl", lambda key, *a, **kw: "flashgen")
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", ratio, source))
    monkeypatch.setattr(vendor, "default_choice", lambda spec, cuda: "sdpa_cudnn")
    q = _Cuda(*shape)
    k = _Cuda(shape[0], shape[1] // 4, shape[2], shape[3])
    assert vendor.winner(q, k, k, True, False) == want


def test_a_call_with_a_backward_needs_the_larger_margin(monkeypatch):
    """The same record's saving clears the forward's margin and not a training call's: the
    backward record's ratio is applied to ~3.5x the forward's time (gain_s)."""
    monkeypatch.setattr(vendor, "remember_impl", lambda key, *a, **kw: "flashgen")
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", 1.03, "shipped"))
    monkeypatch.setattr(vendor, "default_choice", lambda spec, cuda: "sdpa_cudnn")
    monkeypatch.setattr(vendor, "settled_impls", {})  # no choice cached by another test
    q = _Cuda(16, 16, 1024, 128)  # ~196 µs not causal: 1.03x saves ~5.7 µs, ~20 µs with a backward
    assert vendor.winner(q, q, q, False, False) == "sdpa_cudnn"
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", 1.1, "shipped"))
    assert vendor.winner(q, q, q, False, False) == "flashgen"  # ~18 µs forward
    assert vendor.winner(q, q, q, False, True) == "flashgen"  # ~62 µs with a backward
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", 1.06, "shipped"))
    assert vendor.winner(q, q, q, False, False) == "flashgen"  # ~11 µs
    assert vendor.winner(q, q, q, False, True) == "sdpa_cudnn"  # ~39 µs
    assert vendor.host_margin_s(False) < vendor.host_margin_s(True)


def test_the_mix_takes_the_forward_only_where_a_training_call_would(monkeypatch):
    """A training call runs flashgen's forward under cuDNN's backward (the mix) only where the
    forward's record saves the margin of a call with a backward, not the forward alone's."""
    monkeypatch.setattr(vendor, "remember_impl", lambda key, *a, **kw: "flashgen")
    monkeypatch.setattr(vendor, "needs_backward", lambda q, k, v: True)
    monkeypatch.setattr(vendor, "default_choice", lambda spec, cuda: "sdpa_cudnn")
    monkeypatch.setattr(vendor, "settled_impls", {})
    q = _Cuda(16, 16, 1024, 128)  # ~196 µs not causal
    for ratio, want in ((1.15, False), (1.5, True)):  # saves ~26 µs / ~65 µs
        monkeypatch.setattr(
            vendor, "impl_choice", lambda *a, r=ratio, **kw: ("flashgen", r, "shipped")
        )
        assert vendor.winner(q, q, q, False, False) == "flashgen"  # a forward alone: >= 10 µs
        assert vendor.hybrid_backward(q, q, q, False, True, "sdpa_cudnn") is want
    # forced or without a comparison: not second-guessed, as in `winner`
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", 1.01, "forced"))
    assert vendor.hybrid_backward(q, q, q, False, True, "sdpa_cudnn") is True


def test_a_vendor_default_is_kept_by_the_host_rule(monkeypatch):
    """Where the defaults name flashgen (an unknown GPU), a small call keeps flashgen."""
    monkeypatch.setattr(vendor, "remember_impl", lambda key, *a, **kw: "flashgen")
    monkeypatch.setattr(vendor, "impl_choice", lambda *a, **kw: ("flashgen", 1.06, "exact"))
    monkeypatch.setattr(vendor, "default_choice", lambda spec, cuda: "flashgen")
    q = _Cuda(1, 1, 128, 64)
    assert vendor.winner(q, q, q, False, False) == "flashgen"


def test_a_training_forwards_choice_is_kept_apart_from_a_forward_alones(monkeypatch):
    """`winner(..., in_training=True)` (the mix's forward) and the forward alone read the same
    record under different host margins: each settled answer is kept under its own key, and
    a later call of either takes it without asking the records again."""
    asked = []
    settled = {}
    monkeypatch.setattr(vendor, "settled_impls", settled)
    monkeypatch.setattr(
        vendor, "remember_impl", lambda key, *a, **kw: settled.setdefault(key, "flashgen")
    )
    monkeypatch.setattr(vendor, "default_choice", lambda spec, cuda: "sdpa_cudnn")
    monkeypatch.setattr(
        vendor, "impl_choice", lambda *a, **kw: asked.append(1) or ("flashgen", 1.15, "shipped")
    )
    q = _Cuda(16, 16, 1024, 128)  # ~196 µs not causal: 1.15x saves ~26 µs, under 50
    for _ in range(2):
        assert vendor.winner(q, q, q, False, False) == "flashgen"
        assert vendor.winner(q, q, q, False, False, in_training=True) == "sdpa_cudnn"
    assert len(asked) == 2  # once each
    assert sorted(settled.values()) == ["flashgen", "sdpa_cudnn"]


def test_a_capture_on_a_gpu_whose_defaults_name_flashgen_skips_the_database(monkeypatch):
    """During a CUDA graph capture a miss takes the defaults without asking the database; where
    they name flashgen (any GPU but the H200), the host rule's look at the record must not ask
    it either. (On an H100 the GPU test of this ran into the database through that look.)"""
    dispatch.clear_cache()
    monkeypatch.setattr(dispatch, "_gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(vendor, "_capturing", lambda t: True)

    def no_query(key):
        raise AssertionError("the tuning database was asked during capture")

    monkeypatch.setattr(dispatch, "_miss", no_query)
    q = _Cuda(1, 4, 512, 64)
    try:
        assert vendor.winner(q, q, q, True, False) == "flashgen"
        assert vendor.winner(q, q, q, True, True) == "flashgen"
    finally:
        dispatch.clear_cache()
