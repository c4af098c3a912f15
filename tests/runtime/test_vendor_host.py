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
    key = (37, 37, 32, False, torch.float32, False, False)
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
