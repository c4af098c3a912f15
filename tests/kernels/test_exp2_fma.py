"""The FMA exponential of the Hopper forward (HopperConfig.fma_exp): its arithmetic, step by step
in float32 (flashgen.kernels.exp2_fma.exp2_ref), against float64, and the template's constants
against the module's. The kernel's own output is checked on the GPU (tests/kernels/test_hopper.py:
the fma_exp layout and mask cases against float64)."""

from __future__ import annotations

import numpy as np
import pytest

from flashgen.core.hopper_config import HopperConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels import exp2_fma


def test_relative_error_is_within_the_bound_over_the_softmax_range():
    # every float32 in a dense sweep of the softmax's arguments (x <= 0) down to where 2**x
    # leaves the normal range, and odd values near the split points j +- 1/2
    x = np.concatenate([
        np.linspace(-126.0, 0.0, 4_000_001, dtype=np.float32),
        (np.arange(-126, 1, dtype=np.float32)[:, None] + np.float32([-0.5, -0.4999, 0.4999, 0.5]))
        .ravel(),
    ])  # fmt: skip
    x = x[(x <= 0) & (x >= -126)]
    exact = np.exp2(x.astype(np.float64))
    rel = np.abs(exp2_fma.exp2_ref(x).astype(np.float64) / exact - 1.0)
    assert rel.max() <= exp2_fma.MAX_REL_ERROR
    # and it is not looser than it needs to be (the bound is the fit's, not a guess)
    assert rel.max() >= 0.9 * exp2_fma.MAX_REL_ERROR


def test_hidden_keys_give_exact_zero_and_nothing_is_negative():
    hidden = np.float32([-np.inf, -1e30, -200.0, -127.5, -127.0])
    assert (exp2_fma.exp2_ref(hidden) == 0.0).all()
    assert not np.signbit(exp2_fma.exp2_ref(hidden)).any()
    tail = np.linspace(-127.0, -120.0, 100_001, dtype=np.float32)
    y = exp2_fma.exp2_ref(tail)
    assert (y >= 0).all() and np.isfinite(y).all()


def test_integers_give_exact_powers_and_small_positive_rounding_is_harmless():
    j = np.arange(-126, 1, dtype=np.float32)
    assert (exp2_fma.exp2_ref(j) == np.exp2(j)).all()
    # the fused x * scale - m can come out a few ulps above 0 for a row's largest score
    y = exp2_fma.exp2_ref(np.float32([1e-7, 1e-6]))
    assert np.allclose(y, 1.0, rtol=2e-4, atol=0)


def test_template_prints_the_module_constants():
    from flashgen.kernels.codegen import render
    from flashgen.kernels.hopper import gluon_api

    if gluon_api()[0] is None:
        pytest.skip("the installed Triton has no Gluon Hopper API")
    source = render(KernelSpec(128, False, "bfloat16", "fwd"), family="hopper")
    for name, value in zip(("EXP2_C1", "EXP2_C2", "EXP2_C3"), exp2_fma.COEFFS, strict=True):
        assert f"{name} = gl.constexpr({value!r})" in source
    assert f"ROUND_MAGIC = gl.constexpr({exp2_fma.ROUND_MAGIC!r})" in source
    assert f"EXP2_CLAMP = gl.constexpr({exp2_fma.CLAMP!r})" in source


def test_fma_exp_levels_and_consumers():
    from flashgen.core.config import FieldError

    assert HopperConfig(128, 128, 2, 2, 4, 168, False, fma_exp=2).short().endswith("F2)")
    assert HopperConfig(192, 64, 3, 3, 4, 128, False, fma_exp=1).short().endswith("F1)")
    for bad in (True, 3, -1):
        with pytest.raises(FieldError, match="fma_exp"):
            HopperConfig(128, 128, 2, 2, 4, 168, False, fma_exp=bad)
    with pytest.raises(FieldError, match="fma_exp"):
        HopperConfig(128, 128, 2, 1, 8, 168, False, fma_exp=1)
