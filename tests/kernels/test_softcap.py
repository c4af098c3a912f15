"""Logit softcapping (Gemma-2: the scaled scores s become cap * tanh(s / cap)) in the portable
kernels (issue 16), on the CPU interpreter: forward and backward against a float64 reference,
alone and with causal masks and sliding windows, GQA, Sq != Sk, odd lengths, both kernel builds,
argument checks and the op under torch.compile. Bf16 numerics need the GPU (`gpu` test)."""

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


def capped_ref(q, k, v, *, cap, causal=False, window=None, scale=None):
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    s = cap * torch.tanh(s / cap)
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    visible = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= i
    if window is not None:
        visible &= (j >= i - window[0]) & (j <= i + window[1])
    return torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0) @ v


def _inputs(b, hq, hkv, sq, sk, d, dtype, seed=0, spread=3.0):
    gen = torch.Generator().manual_seed(seed)
    # spread > 1: scores large enough that the cap really bends them
    return [
        (spread * torch.randn(b, h, s, d, generator=gen)).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


CASES = [
    # b, hq, hkv, sq, sk, d, causal, window, cap
    (1, 2, 1, 37, 37, 32, False, None, 5.0),
    (1, 2, 2, 45, 29, 16, True, None, 2.0),
    (1, 4, 2, 61, 61, 40, True, 16, 30.0),
]


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize("case", CASES)
def test_forward_backward_match_float64(case, tma, monkeypatch):
    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma)
    b, hq, hkv, sq, sk, d, causal, win, cap = case
    if tma == "1" and case is not CASES[2]:
        pytest.skip("the TMA build shares the softcap code: one case covers it (CI time)")
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, torch.float32)
    window = normalize_window(win, causal)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=TILES, window=window,
                       softcap=cap)  # fmt: skip
    ref = capped_ref(q, k, v, cap=cap, causal=causal, window=window)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    uncapped = capped_ref(q, k, v, cap=1e9, causal=causal, window=window)
    assert (ref - uncapped).abs().max() > 1e-2  # the cap matters in this case
    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=1 / math.sqrt(d), config=TILES,
                     window=window, softcap=cap)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(capped_ref(qd, kd, vd, cap=cap, causal=causal, window=window),
                               (qd, kd, vd), do.double())  # fmt: skip
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want, strict=True):
        torch.testing.assert_close(got.double(), exp, atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    ("dtype", "cap", "fixed"),
    [(torch.float32, 50.0, True), (torch.float32, 60.0, False), (torch.float16, 9.0, True),
     (torch.float16, 50.0, False)],
    ids=["fp32-fixed_max", "fp32-running_max", "fp16-fixed_max", "fp16-running_max"],
)  # fmt: skip
def test_rows_at_the_caps_ends(dtype, cap, fixed):
    """The running max dropped (FIXED_MAX: cap * log2(e) within the dtype's limit,
    `plans.small_cap`: 80, float16 14) or kept (a larger cap): rows whose every score sits at
    -cap (probabilities 2**-72 from 0 at a cap of 50) or at +cap (2**72; float16 holds P only up
    to 65504, so its caps stop at 9.7), beside ordinary rows, a causal window and a ragged last
    block, against float64; each cap class has its own plan."""
    from flashgen.kernels import fwd, plans

    gen = torch.Generator().manual_seed(3)
    k = torch.randn(1, 2, 45, 32, generator=gen) + 4.0  # every key leans the same way
    v = torch.randn(1, 2, 45, 32, generator=gen)
    q = torch.randn(1, 2, 45, 32, generator=gen)
    q[:, :, :10] = -40.0  # scores about -900: tanh at -1 for every key
    q[:, :, 10:20] = 40.0  # and at +1
    q, k, v = (t.to(dtype) for t in (q, k, v))
    window = normalize_window(13, True)
    fwd._plans.clear()
    out, _ = forward(q, k, v, causal=True, scale=None, config=TILES, window=window, softcap=cap)
    ref = capped_ref(q, k, v, cap=cap, causal=True, window=window)
    tol = 2e-5 if dtype == torch.float32 else 3e-3
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol * 5)
    (plan,) = fwd._plans.values()
    name = str(dtype).removeprefix("torch.")
    assert plan.run.constexprs["FIXED_MAX"] is plans.small_cap(cap, name) is fixed


def test_fixed_max_needs_a_bounded_rendering():
    """The portable rendering: ALiBi and an additive mask add terms the cap does not bound, so
    those have no FIXED_MAX at all; a plain softcapped one has it, off unless passed (the
    decision itself: test_hopper.py's test_fixed_max_follows_the_cap_and_the_rendering)."""
    from flashgen.kernels.codegen import render

    capped = KernelSpec(64, True, "float32", "fwd", softcap=True)
    assert "FIXED_MAX: tl.constexpr = False" in render(capped)
    for extra in ({"alibi": True}, {"attn_mask": "add"}):
        spec = KernelSpec(64, True, "float32", "fwd", softcap=True, **extra)
        assert "FIXED_MAX: tl.constexpr" not in render(spec)


def test_fp16_through_the_op_and_compile():
    """fp16 with autograd through `flashgen.attention`, then the op under
    torch.compile(fullgraph=True, dynamic=True) at two lengths."""
    q, k, v = (t.requires_grad_() for t in _inputs(1, 2, 1, 33, 33, 64, torch.float16, seed=4,
                                                   spread=1.5))  # fmt: skip
    out = attention(q, k, v, causal=True, softcap=8.0)
    torch.testing.assert_close(out.double(), capped_ref(q, k, v, cap=8.0, causal=True),
                               atol=3e-3, rtol=3e-3)  # fmt: skip
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    capped_ref(qd, kd, vd, cap=8.0, causal=True).sum().backward()
    for got, exp in zip(grads, (qd.grad, kd.grad, vd.grad), strict=True):
        torch.testing.assert_close(got.double(), exp, atol=2e-2, rtol=2e-2)

    compiled = torch.compile(lambda q, k, v: attention(q, k, v, softcap=4.0), fullgraph=True,
                             dynamic=True)  # fmt: skip
    for n in (19, 34):
        q, k, v = _inputs(1, 2, 2, n, n, 16, torch.float32, seed=n)
        torch.testing.assert_close(compiled(q, k, v).double(), capped_ref(q, k, v, cap=4.0),
                                   atol=2e-5, rtol=1e-4)  # fmt: skip
    q, k, v = _inputs(1, 2, 1, 19, 19, 16, torch.float32)
    torch.library.opcheck(torch.ops.flashgen.attention_fwd.default,
                          (q, k, v, True, 0.25, None, 3.0))  # fmt: skip


def test_softcap_as_an_argument_of_a_compiled_function():
    """softcap passed into a torch.compile(dynamic=True) function as an argument (not a
    constant of the function): Dynamo makes it a symbolic float, which the checks once passed
    to math.isfinite, failing the compile (found by benchmarks/op_fuzz.py, seed 11); the
    checks now compare it. Two caps, each against float64."""
    fn = torch.compile(lambda q, k, v, cap: attention(q, k, v, causal=True, softcap=cap),
                       fullgraph=True, dynamic=True)  # fmt: skip
    q, k, v = _inputs(1, 2, 1, 21, 21, 16, torch.float32, seed=2)
    for cap in (3.0, 7.5):
        torch.testing.assert_close(fn(q, k, v, cap).double(),
                                   capped_ref(q, k, v, cap=cap, causal=True),
                                   atol=2e-5, rtol=1e-4)  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"softcap": 0.0}, "softcap must be a positive finite float"),
        ({"softcap": float("inf")}, "softcap must be a positive finite float"),
        ({"softcap": float("nan")}, "softcap must be a positive finite float"),
        ({"softcap": -2.0}, "softcap must be a positive finite float"),
        ({"softcap": "50"}, "softcap must be a positive float or None"),
        ({"softcap": True}, "softcap must be a positive float or None"),
        ({"softcap": 50.0, "impl": "sdpa_efficient"}, "SDPA has no logit softcapping"),
    ],
)
def test_bad_softcap_names_the_argument(kwargs, message):
    assert_refused(_inputs(1, 1, 1, 17, 17, 16, torch.float32), kwargs, message)


def test_spec_uri_round_trip():
    for window in (False, True):
        spec = KernelSpec(256, True, "bfloat16", "fwd", window=window, softcap=True)
        assert KernelSpec.from_uri(spec.uri()) == spec
    assert KernelSpec(256, True, "bfloat16", softcap=True).uri() == "attn_fwd_d256_causalcap_bf16"


def test_tuner_times_and_checks_at_the_run_times_cap():
    """`flashgen tune --softcap` times Gemma-2's cap, which bfloat16 runs without the running
    max, and checks against a reference capped alike (not the uncapped one a far cap matched)."""
    from flashgen.kernels.plans import fixed_max
    from flashgen.kernels.reference import attention_ref
    from flashgen.tune import bench

    spec = KernelSpec(64, True, "bfloat16", "fwd", softcap=True)
    assert bench.bench_softcap(spec) == 50.0 and fixed_max(spec, bench.bench_softcap(spec))
    q, k, v = _inputs(1, 2, 1, 20, 20, 64, torch.float32, spread=4.0)
    out, _ = bench._reference(spec, q, k, v)
    torch.testing.assert_close(out, capped_ref(q, k, v, cap=50.0, causal=True), rtol=0, atol=1e-12)
    assert (out - attention_ref(q, k, v, causal=True)[0]).abs().max() > 1e-3


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_tuner_checks_a_softcapped_candidate(direction):
    from flashgen.hardware.costmodel import Shape
    from flashgen.tune.bench import check

    spec = KernelSpec(32, True, "float32", direction, softcap=True)
    assert check(spec, TILES, Shape(1, 2, 1, 40, 40), "cpu").status == "ok"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cap", [50.0, 60.0], ids=["fixed_max", "running_max"])
def test_bf16_on_gpu(cap):
    """Head dim 256 (Gemma-2's smaller models): the portable family on an H100/H200, with and
    without the running max."""
    q, k, v = (t.cuda() for t in _inputs(2, 8, 4, 1001, 1001, 256, torch.bfloat16, seed=9,
                                         spread=1.0))  # fmt: skip
    out = attention(q, k, v, causal=True, window=4096, softcap=cap)
    ref = capped_ref(q, k, v, cap=cap, causal=True, window=(4095, 0))
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
