"""Sliding-window (local) attention in the portable kernels (issue 16), on the CPU interpreter.

Forward and backward against a float64 reference that builds the band as a dense mask, with odd
lengths, GQA, Sq != Sk, windows of 1, 16 and longer than the sequence, two-sided bands, rows
whose band holds no key (zeros, no NaN), small tiles so that blocks outside the band really are
skipped and edge blocks masked, both the pointer and the TMA builds, and the op's argument
checks. Bf16 numerics need the GPU (the `gpu` test at the end; the interpreter's bf16 dot is
broken).
"""

from __future__ import annotations

import math

import pytest
import torch
from refusals import assert_refused

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels.bwd import backward
from flashgen.kernels.fwd import forward
from flashgen.kernels.validate import normalize_window
from flashgen.ops import attention

TILES = TileConfig(16, 16, 4, 1)
TILES_WIDE = TileConfig(32, 16, 4, 1)


def band_ref(q, k, v, *, causal, window, scale=None):
    """float64 attention with query i seeing keys i - left <= j <= i + right (and j <= i when
    causal); a row that sees nothing gives zeros."""
    left, right = window
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    visible = (j >= i - left) & (j <= i + right)
    if causal:
        visible &= j <= i
    p = torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
    return p @ v


def _inputs(b, hq, hkv, sq, sk, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


CASES = [
    # b, hq, hkv, sq, sk, d, causal, window (as flashgen.attention takes it)
    (1, 2, 1, 37, 37, 32, True, 16),
    (1, 2, 2, 127, 127, 16, True, 1),
    (2, 4, 2, 37, 37, 40, True, 500),  # wider than the sequence: plain causal
    (1, 2, 1, 127, 101, 32, False, (20, 7)),
    (1, 1, 1, 90, 30, 16, False, (3, 5)),  # rows 36.. see no key: zeros
    (1, 1, 1, 30, 90, 16, True, 9),  # Sq < Sk, top-left causal
    (1, 2, 1, 501, 501, 16, True, 16),
]


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize("case", CASES)
def test_forward_backward_match_float64(case, tma, monkeypatch):
    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma)
    b, hq, hkv, sq, sk, d, causal, win = case
    if tma == "1" and case not in (CASES[0], CASES[3], CASES[4]):
        pytest.skip("the TMA build shares the band code: three cases cover it (CI time)")
    dtype = torch.float32
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, dtype)
    window = normalize_window(win, causal)
    cfg = TILES if sq % 2 else TILES_WIDE
    out, lse = forward(q, k, v, causal=causal, scale=None, config=cfg, window=window)
    ref = band_ref(q, k, v, causal=causal, window=window)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    assert torch.isfinite(lse).sum() > 0

    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=1 / math.sqrt(d), config=cfg,
                     window=window)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(band_ref(qd, kd, vd, causal=causal, window=window), (qd, kd, vd),
                               do.double())  # fmt: skip
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want, strict=True):
        assert not torch.isnan(got).any(), name
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4, msg=name)


def test_fp16_and_autograd_through_the_op():
    """fp16 through `flashgen.attention` with autograd (the default config), GQA, odd length."""
    q, k, v = (t.requires_grad_() for t in _inputs(1, 4, 2, 77, 77, 64, torch.float16, seed=3))
    out = attention(q, k, v, causal=True, window=16)
    ref = band_ref(q, k, v, causal=True, window=(15, 0))
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(band_ref(qd, kd, vd, causal=True, window=(15, 0)), (qd, kd, vd),
                               do.double())  # fmt: skip
    for got, exp in zip(grads, want, strict=True):
        torch.testing.assert_close(got.double(), exp, atol=1e-2, rtol=1e-2)


def test_window_differs_from_plain_causal():
    """The band really cuts keys off (a kernel ignoring the window would fail here)."""
    q, k, v = _inputs(1, 1, 1, 64, 64, 16, torch.float32, seed=5)
    banded = attention(q, k, v, causal=True, window=4)
    plain = attention(q, k, v, causal=True)
    assert (banded - plain)[..., 8:, :].abs().max() > 1e-2
    torch.testing.assert_close(banded[..., :4, :], plain[..., :4, :])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"causal": False, "window": 8}, "needs causal=True"),
        ({"causal": True, "window": 0}, "window must be >= 1"),
        ({"causal": True, "window": True}, "window must be an int"),
        ({"causal": False, "window": (3, -1)}, "window's right size"),
        ({"causal": False, "window": (1, 2, 3)}, "window must be an int"),
        ({"causal": True, "window": 4, "impl": "sdpa_efficient"}, "SDPA has no sliding window"),
    ],
)
def test_bad_window_names_the_argument(kwargs, message):
    assert_refused(_inputs(1, 1, 1, 17, 17, 16, torch.float32), kwargs, message)


def test_spec_uri_round_trip():
    for causal in (False, True):
        spec = KernelSpec(64, causal, "float16", "bwd", window=True)
        assert KernelSpec.from_uri(spec.uri()) == spec
        assert spec.uri() != KernelSpec(64, causal, "float16", "bwd").uri()
    assert KernelSpec(64, True, "float16", window=True).uri() == "attn_fwd_d64_causalwin_f16"


def test_op_under_compile_dynamic_and_opcheck():
    """The op with a window under torch.compile(fullgraph=True, dynamic=True) at two lengths,
    and torch.library.opcheck on the primitive (fake impl, schema, autograd registration)."""

    def f(q, k, v):
        return attention(q, k, v, causal=True, window=5) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for n in (23, 41):
        q, k, v = (t.requires_grad_() for t in _inputs(1, 2, 1, n, n, 16, torch.float32, seed=n))
        out = compiled(q, k, v)
        torch.testing.assert_close(out.double(), 2 * band_ref(q, k, v, causal=True, window=(4, 0)),
                                   atol=2e-5, rtol=1e-4)  # fmt: skip
        out.sum().backward()
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        (2 * band_ref(qd, kd, vd, causal=True, window=(4, 0))).sum().backward()
        torch.testing.assert_close(q.grad.double(), qd.grad, atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(k.grad.double(), kd.grad, atol=5e-5, rtol=1e-4)
    q, k, v = _inputs(1, 2, 1, 19, 19, 16, torch.float32)
    torch.library.opcheck(torch.ops.flashgen.attention_fwd.default, (q, k, v, False, 0.25, [3, 2]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal,win", [(True, 256), (False, (100, 30))])
def test_bf16_on_gpu(causal, win):
    q, k, v = (t.cuda() for t in _inputs(2, 8, 2, 1003, 1003, 128, torch.bfloat16, seed=7))
    out = attention(q, k, v, causal=causal, window=win)
    ref = band_ref(q, k, v, causal=causal, window=normalize_window(win, causal))
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("causal", [False, True])
def test_tuner_checks_a_windowed_candidate(direction, causal):
    """`flashgen tune` on a windowed spec (e.g. from --pending) checks and times the windowed
    kernel itself, with a band covering every key (`flashgen.bench.bench_window`)."""
    from flashgen.hardware.costmodel import Shape
    from flashgen.tune.bench import bench_window, check

    spec = KernelSpec(32, causal, "float32", direction, window=True)
    outcome = check(spec, TILES, Shape(1, 2, 1, 45, 45), "cpu")
    assert outcome.status == "ok", outcome
    q, k, _ = _inputs(1, 2, 1, 45, 30, 32, torch.float32)
    assert bench_window(spec, q, k) == (45, 45)
    assert bench_window(KernelSpec(32, causal, "float32", direction), q, k) is None
