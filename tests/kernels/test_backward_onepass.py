"""The one-pass backward (kind "onepass", templates/attn_bwd_onepass.py.jinja) against float64,
and how the backward kind is chosen (deterministic mode).

The kernels run in Triton's CPU interpreter here, whose `tl.atomic_add` on CPU tensors adds
exactly (checked before this kernel was written); the interpreter has no TMA reduce, so the
descriptor build is covered with element atomics, and TMA reduce-add on the GPU only. Same
tolerances as tests/kernels/test_backward.py (shared helpers).
"""

from __future__ import annotations

import pytest
import torch
from test_backward import (
    BF16,
    CASES,
    F16,
    F32,
    TMA_CASES,
    assert_grads_close,
    kernel_grads,
    make_inputs,
)

import flashgen
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels import bwd
from flashgen.kernels.bwd import backward
from flashgen.kernels.bwd_kind import DEFAULT_KIND, resolve_kind
from flashgen.kernels.plans import PlanCache

HAS_CUDA = torch.cuda.is_available()
PLAIN = KernelSpec(64, False, "float16", "bwd")


# the split kind's cases that the one-pass kind runs (head dims <= 128)
ONEPASS_CASES = [c for c in CASES if c.values[1] <= 128]


@pytest.mark.parametrize("dtype,d,sq,sk,causal,hq,hkv", ONEPASS_CASES)
def test_onepass_matches_float64(dtype, d, sq, sk, causal, hq, hkv):
    q, k, v, do = make_inputs(1, hq, hkv, sq, sk, d, dtype)
    got = kernel_grads(q, k, v, do, causal=causal, kind="onepass")
    assert_grads_close(got, q, k, v, do, causal=causal)


@pytest.mark.parametrize("dtype,d,sq,sk,causal,hq,hkv", TMA_CASES)
def test_onepass_tma_build_matches_float64(dtype, d, sq, sk, causal, hq, hkv):
    """Q/K/V/dO by descriptor (zero fill past the ends instead of masks)."""
    q, k, v, do = make_inputs(1, hq, hkv, sq, sk, d, dtype, seed=13)
    got = kernel_grads(q, k, v, do, causal=causal, tma=True, kind="onepass")
    assert_grads_close(got, q, k, v, do, causal=causal)


@pytest.mark.parametrize(
    "cfg",
    [TileConfig(16, 32, 4, 1), TileConfig(32, 16, 4, 1), TileConfig(64, 16, 4, 1),
     TileConfig(16, 64, 4, 1)],
    ids=lambda c: c.short(),
)  # fmt: skip
@pytest.mark.parametrize("sq,sk", [(53, 70), (70, 53), (130, 501)], ids=["sq<sk", "sq>sk", "501"])
def test_onepass_block_shapes_causal(cfg, sq, sk):
    """Diagonal splits for every BLOCK_M/BLOCK_N ratio, ragged lengths both ways, GQA 4/1 (the
    rotated walk over whole query blocks starts at a different block per key block)."""
    q, k, v, do = make_inputs(1, 4, 1, sq, sk, 32, F32, seed=1)
    got = kernel_grads(q, k, v, do, causal=True, config=cfg, kind="onepass")
    assert_grads_close(got, q, k, v, do, causal=True)


def test_onepass_full_many_blocks_gqa():
    """Non-causal, many whole query blocks per key block (rotation wraps), GQA 3/1, D 40."""
    q, k, v, do = make_inputs(2, 3, 1, 200, 90, 40, F32, seed=4)
    got = kernel_grads(q, k, v, do, causal=False, config=TileConfig(32, 32, 4, 1), kind="onepass")
    assert_grads_close(got, q, k, v, do, causal=False)


def test_onepass_strided_inputs():
    """Views of a [B, S, H, D] layout and a stride-0 dO, as the split kind's test."""
    gen = torch.Generator().manual_seed(6)
    b, s, h, d = 2, 37, 2, 64
    device = "cuda" if HAS_CUDA else "cpu"
    q = torch.randn(b, s, h, d, generator=gen).to(device).transpose(1, 2)
    kv = torch.randn(b, s, 2, 1, d, generator=gen).to(device)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    ones = torch.ones((), device=device).expand(b, h, s, d)
    got = kernel_grads(q, k, v, ones, causal=True, kind="onepass")
    assert_grads_close(got, q, k, v, ones.contiguous(), causal=True)


def test_onepass_agrees_with_split():
    """The two kinds compute the same gradients (fp32: to rounding)."""
    q, k, v, do = make_inputs(1, 4, 2, 70, 90, 64, F32, seed=8)
    one = kernel_grads(q, k, v, do, causal=True, kind="onepass")
    two = kernel_grads(q, k, v, do, causal=True, kind="split")
    for a, b in zip(one, two, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_needs_without_dq_runs_split_and_skips():
    """dK/dV alone: the one-pass kernel would compute dQ for nothing; the split kind's dK/dV
    kernel runs instead, and what is not wanted comes back None."""
    q, k, v, do = make_inputs(1, 2, 1, 37, 37, 32, F32, seed=7)
    full = kernel_grads(q, k, v, do, causal=True, kind="onepass")
    dq, dk, dv = kernel_grads(q, k, v, do, causal=True, kind="onepass", needs=(False, True, True))
    assert dq is None
    torch.testing.assert_close(dk, full[1], rtol=1e-5, atol=1e-5)
    dq, dk, dv = kernel_grads(q, k, v, do, causal=True, kind="onepass", needs=(True, False, False))
    assert dk is None and dv is None
    torch.testing.assert_close(dq, full[0], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ choosing the kind


@pytest.fixture
def no_kind_env(monkeypatch):
    monkeypatch.delenv("FLASHGEN_BWD_KIND", raising=False)


def test_kind_follows_torch_deterministic_flag(no_kind_env):
    assert resolve_kind(None, None, PLAIN) == DEFAULT_KIND
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert resolve_kind(None, None, PLAIN) == "split"
        assert resolve_kind(False, None, PLAIN) == DEFAULT_KIND  # explicit wins
    finally:
        torch.use_deterministic_algorithms(before)


def test_kind_explicit_and_errors(no_kind_env, monkeypatch):
    assert resolve_kind(False, "split", PLAIN) == "split"
    assert resolve_kind(False, "onepass", PLAIN) == "onepass"
    assert resolve_kind(True, None, PLAIN) == "split"
    with pytest.raises(ValueError, match="not deterministic"):
        resolve_kind(True, "onepass", PLAIN)
    with pytest.raises(ValueError, match="kind must be one of"):
        resolve_kind(False, "fused", PLAIN)
    # window, softcap and head dims above 128 have split kernels only
    for spec in (
        KernelSpec(64, True, "float16", "bwd", window=True),
        KernelSpec(64, False, "float16", "bwd", softcap=True),
        KernelSpec(192, False, "bfloat16", "bwd"),
    ):
        with pytest.raises(ValueError, match="no kernel for"):
            resolve_kind(False, "onepass", spec)
        assert resolve_kind(False, None, spec) == "split"
    assert resolve_kind(False, "onepass", KernelSpec(128, True, "float16", "bwd")) == "onepass"
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "split")
    assert resolve_kind(False, None, PLAIN) == "split"
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "onepass")
    assert resolve_kind(True, None, PLAIN) == "split"  # the env var never overrides
    assert resolve_kind(False, None, KernelSpec(256, False, "float16", "bwd")) == "split"
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "bogus")
    with pytest.raises(ValueError, match="FLASHGEN_BWD_KIND"):
        resolve_kind(False, None, PLAIN)


def _ran_kinds(monkeypatch):
    """Record the kind of every plan built from here on."""
    seen = []
    real = bwd._Plan

    def spy(*args, **kwargs):
        seen.append(kwargs.get("kind", args[12] if len(args) > 12 else "split"))
        return real(*args, **kwargs)

    monkeypatch.setattr(bwd, "_Plan", spy)
    monkeypatch.setattr(bwd, "_plans", PlanCache())
    return seen


@pytest.mark.parametrize("det", [None, True, False], ids=["flag", "det", "fast"])
def test_public_attention_deterministic_option(det, monkeypatch):
    """flashgen.attention(deterministic=...) reaches the backward: True -> split, False ->
    the preferred kind (FLASHGEN_BWD_KIND=onepass here), None -> torch's flag (on here)."""
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "onepass")
    seen = _ran_kinds(monkeypatch)
    q, k, v, do = make_inputs(1, 2, 1, 37, 45, 32, F16, seed=5)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        out = flashgen.attention(*leaves, causal=True, deterministic=det, impl="flashgen")
        out.backward(do)
    finally:
        torch.use_deterministic_algorithms(before)
    assert seen == (["split"] if det in (None, True) else ["onepass"])
    assert_grads_close([t.grad for t in leaves], q, k, v, do, causal=True)


def test_bad_deterministic_names_the_argument():
    q, k, v, _ = make_inputs(1, 1, 1, 8, 8, 16, F32)
    with pytest.raises(ValueError, match="deterministic"):
        flashgen.attention(q, k, v, deterministic="yes")


# ------------------------------------------------------------------ GPU (real bf16)


@pytest.mark.gpu
@pytest.mark.parametrize("dq_tma", [False, True], ids=["atomics", "tma-reduce"])
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"d{d}")
def test_onepass_bf16_gpu(d, causal, tma, dq_tma, monkeypatch):
    """Real bf16 tensor cores, our forward feeding both one-pass builds (and TMA reduce-add of
    the dQ partials), ragged GQA shape."""
    if dq_tma and not tma:
        pytest.skip("TMA reduce is a descriptor-build option")
    from flashgen.kernels.fwd import forward

    monkeypatch.setenv("FLASHGEN_BWD_DQ_TMA", "1" if dq_tma else "0")
    q, k, v, do = make_inputs(2, 8, 2, 300, 257, d, BF16, seed=11)
    cfg = TileConfig(64, 64, 4, 2)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=cfg)
    got = backward(
        do, q, k, v, out, lse, causal=causal, scale=d**-0.5, config=cfg, tma=tma,
        deterministic=False, kind="onepass",
    )  # fmt: skip
    assert_grads_close(got, q, k, v, do, causal=causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_mode_bit_identical_gpu(causal):
    """torch.use_deterministic_algorithms(True): five backward runs, identical bits, and
    within the float64 bound (GQA 8/2 over many blocks, where atomics would reorder)."""
    q, k, v, do = make_inputs(2, 8, 2, 1000, 1000, 128, BF16, seed=12)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        runs = []
        for _ in range(5):
            for t in leaves:
                t.grad = None
            flashgen.attention(*leaves, causal=causal, impl="flashgen").backward(do)
            runs.append([t.grad.clone() for t in leaves])
    finally:
        torch.use_deterministic_algorithms(before)
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run, strict=True))
    assert_grads_close(runs[0], q, k, v, do, causal=causal)


@pytest.mark.gpu
def test_onepass_fast_mode_float64_gpu(monkeypatch):
    """The one-pass kind through the public op (deterministic=False, FLASHGEN_BWD_KIND=onepass,
    configs from the runtime: the split kind's record or default when it fits the one-pass
    kernel, else `config_for_kind`) against float64."""
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "onepass")
    monkeypatch.setattr(bwd, "_plans", {})
    seen = _ran_kinds(monkeypatch)
    q, k, v, do = make_inputs(2, 8, 2, 1000, 1000, 128, BF16, seed=12)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    flashgen.attention(*leaves, causal=False, impl="flashgen", deterministic=False).backward(do)
    assert seen == ["onepass"]
    assert_grads_close([t.grad for t in leaves], q, k, v, do, causal=False)
