"""Backward kernels (dQ, dK, dV) against float64 autograd through the reference attention.

Kernels run in Triton's CPU interpreter here (CUDA when present). The interpreter cannot do bf16
dot products, so the CPU bf16 rendering upcasts to fp32 before each tl.dot:
the `bf16-interp-fp32dot` cases check the bf16 rendering, rounding and load/store path;
`test_backward_bf16_gpu` checks real bf16 arithmetic on a GPU.

Tolerance: float32 is held to 2e-5 relative to the gradient's size (IEEE fp32 dots). Half
types are held to a small multiple of PyTorch's own same-dtype error (SDPA math backward vs
float64) plus a floor, so the bound follows what the dtype can achieve.
"""

from __future__ import annotations

import math
from dataclasses import astuple

import pytest
import torch

from flashgen.core.config import TileConfig
from flashgen.kernels import bwd as bwd_module
from flashgen.kernels.bwd import backward
from flashgen.kernels.launch import Launch
from flashgen.kernels.reference import attention_ref, sdpa_same_dtype
from flashgen.ops import attention

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
BF16_ID = "bf16" if HAS_CUDA else "bf16-interp-fp32dot"
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
SMALL = TileConfig(32, 32, 4, 1)
HALF_FLOOR = {F16: 5e-4, BF16: 8e-3}


def make_inputs(b, hq, hkv, sq, sk, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)

    return rand(b, hq, sq, d), rand(b, hkv, sk, d), rand(b, hkv, sk, d), rand(b, hq, sq, d)


def reference_grads(q, k, v, do, *, causal, scale=None):
    """Float64 gradients (and out, lse) by autograd through the plain reference."""
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out, lse = attention_ref(*leaves, causal=causal, scale=scale)
    out.backward(do.double())
    return [t.grad for t in leaves], out.detach(), lse.detach()


def eager_grads(q, k, v, do, *, causal, scale=None):
    """PyTorch's own gradients in the inputs' dtype: the yardstick for half precision."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = sdpa_same_dtype(*leaves, causal=causal, scale=scale)
    out.backward(do)
    return [t.grad for t in leaves]


def assert_grads_close(got, q, k, v, do, *, causal, scale=None, names=("dq", "dk", "dv")):
    """Each of `got` (None where not computed) against float64, dtype-aware tolerance."""
    ref, _, _ = reference_grads(q, k, v, do, causal=causal, scale=scale)
    eager = None
    if q.dtype != F32:
        eager = eager_grads(q, k, v, do, causal=causal, scale=scale)
    for i, (name, g, r) in enumerate(zip(names, got, ref, strict=True)):
        if g is None:
            continue
        assert g.shape == r.shape and g.dtype == q.dtype, name
        assert torch.isfinite(g).all(), f"{name} has non-finite values"
        err = (g.double().cpu() - r.cpu()).abs().max().item()
        size = max(1.0, r.abs().max().item())
        if q.dtype == F32:
            bound = 2e-5 * size
        else:
            eager_err = (eager[i].double().cpu() - r.cpu()).abs().max().item()
            bound = 3.0 * eager_err + HALF_FLOOR[q.dtype] * size
        assert err <= bound, f"{name}: max err {err:.3e} > bound {bound:.3e}"


def kernel_grads(
    q, k, v, do, *, causal, scale=None, config=SMALL, needs=(True, True, True), tma=None,
    kind="split",
):  # fmt: skip
    """Backward alone, fed the float64 reference's out/lse cast per the forward contract.
    `kind`: the backward kind (tests/kernels/test_backward_onepass.py runs "onepass")."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    _, out, lse = reference_grads(q, k, v, do, causal=causal, scale=scale)
    return backward(
        do,
        q,
        k,
        v,
        out.to(q.dtype),
        lse.float(),
        causal=causal,
        scale=scale,
        config=config,
        needs=needs,
        tma=tma,
        deterministic=kind == "split",
        kind=kind,
    )


def autograd_grads(q, k, v, do, *, causal, scale=None):
    """Forward + backward through the public differentiable op (dispatch picks configs)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    attention(*leaves, causal=causal, scale=scale).backward(do)
    return [t.grad for t in leaves]


def _case(dtype, d, sq, sk, causal, hq, hkv):
    """A case (dtype, head dim, Sq, Sk, causal, Hq, Hkv) with its id spelled from the values:
    dtype, head dim, lengths, causal or full, and the GQA group where Hq != Hkv."""
    dtype_id = {F32: "f32", F16: "f16", BF16: BF16_ID}[dtype]
    mask = "causal" if causal else "full"
    gqa = f"-gqa{hq // hkv}" if hq != hkv else ""
    name = f"{dtype_id}-d{d}-{sq}x{sk}-{mask}{gqa}"
    return pytest.param(dtype, d, sq, sk, causal, hq, hkv, id=name)


# (dtype, head dim, Sq, Sk, causal, Hq, Hkv): representative, not a full cross-product.
CASES = [
    _case(F32, 64, 37, 37, False, 2, 2),
    _case(F32, 64, 37, 37, True, 2, 2),
    _case(F32, 80, 37, 70, True, 2, 1),
    _case(F32, 80, 70, 37, True, 2, 1),
    _case(F32, 16, 1, 1, True, 1, 1),
    _case(F32, 16, 1, 37, False, 1, 1),
    _case(F32, 128, 127, 33, False, 1, 1),
    _case(F32, 256, 37, 20, True, 1, 1),
    _case(F32, 48, 128, 64, True, 1, 1),
    _case(F16, 64, 64, 128, True, 2, 1),
    _case(F16, 64, 37, 53, True, 4, 2),
    _case(F16, 96, 127, 127, False, 2, 1),
    _case(F16, 256, 20, 37, False, 1, 1),
    _case(BF16, 64, 37, 53, True, 2, 1),
    _case(BF16, 128, 53, 37, False, 2, 2),
]

# The same kind of cases for the descriptor (TMA) build: test_tma_build_matches_float64.
TMA_CASES = [
    _case(F16, 64, 37, 53, True, 4, 2),
    _case(F16, 80, 70, 37, False, 2, 1),
    _case(F32, 64, 64, 128, True, 2, 2),
    _case(BF16, 128, 53, 37, True, 2, 1),
]


@pytest.mark.parametrize("dtype,d,sq,sk,causal,hq,hkv", CASES)
def test_backward_matches_float64(dtype, d, sq, sk, causal, hq, hkv):
    q, k, v, do = make_inputs(1, hq, hkv, sq, sk, d, dtype)
    got = kernel_grads(q, k, v, do, causal=causal)
    assert_grads_close(got, q, k, v, do, causal=causal)


@pytest.mark.parametrize(
    "cfg",
    [
        TileConfig(16, 32, 4, 1),
        TileConfig(32, 16, 4, 1),
        TileConfig(64, 16, 4, 1),
        TileConfig(16, 64, 4, 1),
    ],
    ids=lambda c: c.short(),
)
@pytest.mark.parametrize("sq,sk", [(53, 70), (70, 53)], ids=["sq<sk", "sq>sk"])
def test_backward_block_shapes_causal(cfg, sq, sk):
    """Diagonal splits for every BLOCK_M/BLOCK_N ratio, with ragged lengths both ways."""
    q, k, v, do = make_inputs(1, 2, 1, sq, sk, 32, F32, seed=1)
    got = kernel_grads(q, k, v, do, causal=True, config=cfg)
    assert_grads_close(got, q, k, v, do, causal=True)


@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.parametrize(
    "cfg,dq_cfg",
    [
        (TileConfig(16, 64, 4, 2), TileConfig(64, 16, 4, 2)),
        (TileConfig(32, 16, 4, 1), TileConfig(16, 32, 2, 3)),
    ],
    ids=lambda c: c.short(),
)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_separate_dq_config(cfg, dq_cfg, causal, tma):
    """The dQ kernel on its own tiles, warps and stages (`dq_config`), unlike the dK/dV
    kernel's: diagonal splits and ragged ends of both kernels still right (GQA, Sq != Sk),
    and the plan cache tells the two configs apart (a second call with dQ on the dK/dV
    config gives the same dK/dV and a dQ that also matches)."""
    q, k, v, do = make_inputs(1, 4, 2, 53, 70, 32, F16, seed=5)
    scale = 1.0 / math.sqrt(32)
    _, out, lse = reference_grads(q, k, v, do, causal=causal, scale=scale)
    args = (do, q, k, v, out.to(q.dtype), lse.float())
    got = backward(*args, causal=causal, scale=scale, config=cfg, tma=tma, dq_config=dq_cfg)
    assert_grads_close(got, q, k, v, do, causal=causal, scale=scale)
    same = backward(*args, causal=causal, scale=scale, config=cfg, tma=tma)
    assert torch.equal(same[1], got[1]) and torch.equal(same[2], got[2])
    assert_grads_close(same, q, k, v, do, causal=causal, scale=scale)
    # the launches the two plans hold: dQ's blocks/warps/stages from dq_config or from config
    launched = {
        (key[-2], plan.dq.constexprs["BLOCK_M"], plan.dq.constexprs["BLOCK_N"],
         plan.dq.options["num_warps"], plan.dq.options["num_stages"],
         plan.dkdv.constexprs["BLOCK_M"], plan.dkdv.constexprs["BLOCK_N"])
        for key, plan in bwd_module._plans.items() if key[0] == q.shape and key[9] == causal
    }  # fmt: skip
    assert (dq_cfg, *astuple(dq_cfg), cfg.block_m, cfg.block_n) in launched
    assert (None, *astuple(cfg), cfg.block_m, cfg.block_n) in launched


def test_run_time_config_runs_the_dq_kernels_own(monkeypatch):
    """A config chosen at run time (config=None: the defaults) runs the dQ kernel on
    `dq_config_for` (flashgen.hardware.dq_tiles for the current device; the CPU plans for the
    H200, so the measured table applies here), an explicit one on itself; both right. (A call
    this short would run attn_bwd_short: FLASHGEN_BWD_SHORT=0 keeps the split kernels.)"""
    from flashgen.core.spec import KernelSpec
    from flashgen.hardware.tiles import default_config
    from flashgen.kernels.bwd import dq_config_for

    monkeypatch.setenv("FLASHGEN_BWD_SHORT", "0")
    bwd_module._plans.clear()
    q, k, v, do = make_inputs(1, 2, 1, 70, 53, 64, F16, seed=7)
    got = kernel_grads(q, k, v, do, causal=True, config=None)
    assert_grads_close(got, q, k, v, do, causal=True)
    spec = KernelSpec(64, True, "float16", "bwd")
    base = default_config(spec)
    want = dq_config_for(spec, base)
    plans = [p for key, p in bwd_module._plans.items() if key[0] == q.shape and key[10] is None]
    assert len(plans) == 1 and plans[0].dq is not None
    dq = plans[0].dq
    assert (dq.constexprs["BLOCK_M"], dq.constexprs["BLOCK_N"], dq.options["num_warps"],
            dq.options["num_stages"]) == astuple(want)  # fmt: skip
    assert plans[0].dkdv.constexprs == {"BLOCK_M": base.block_m, "BLOCK_N": base.block_n}


@pytest.mark.parametrize("dtype,d,sq,sk,causal,hq,hkv", TMA_CASES)
def test_tma_build_matches_float64(dtype, d, sq, sk, causal, hq, hkv):
    """The descriptor kernels (`*_tma`): zero fill instead of masks, same gradients."""
    q, k, v, do = make_inputs(1, hq, hkv, sq, sk, d, dtype, seed=13)
    got = kernel_grads(q, k, v, do, causal=causal, tma=True)
    assert_grads_close(got, q, k, v, do, causal=causal)
    again = kernel_grads(q, k, v, do, causal=causal, tma=True)
    assert all(torch.equal(a, b) for a, b in zip(got, again, strict=True))


def test_backward_501_keys():
    """A longer ragged case: many key and query blocks, causal, Sq != Sk."""
    q, k, v, do = make_inputs(1, 1, 1, 130, 501, 32, F32, seed=2)
    got = kernel_grads(q, k, v, do, causal=True, config=TileConfig(64, 64, 4, 1))
    assert_grads_close(got, q, k, v, do, causal=True)


def test_backward_custom_scale():
    q, k, v, do = make_inputs(1, 2, 2, 37, 37, 64, F32, seed=3)
    got = kernel_grads(q, k, v, do, causal=False, scale=0.3)
    assert_grads_close(got, q, k, v, do, causal=False, scale=0.3)


def test_causal_keys_no_query_sees_get_zero_grad():
    """Top-left causal with Sq < Sk: keys j >= Sq are seen by nobody, so dK = dV = 0 there."""
    q, k, v, do = make_inputs(1, 1, 1, 20, 70, 32, F32, seed=4)
    _, dk, dv = kernel_grads(q, k, v, do, causal=True)
    assert torch.count_nonzero(dk[:, :, 20:]) == 0 and torch.count_nonzero(dv[:, :, 20:]) == 0
    assert torch.count_nonzero(dk[:, :, :20]) > 0


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_autograd_through_public_op(causal):
    """Forward and backward kernels together, configs from dispatch."""
    q, k, v, do = make_inputs(2, 4, 2, 37, 45, 64, F16, seed=5)
    got = autograd_grads(q, k, v, do, causal=causal)
    assert_grads_close(got, q, k, v, do, causal=causal)


def test_strided_inputs():
    """q/k/v as views of a [B, S, H, D] layout, a transposed dO and a stride-0 dO."""
    gen = torch.Generator().manual_seed(6)
    b, s, h, d = 2, 37, 2, 64
    q = torch.randn(b, s, h, d, generator=gen).to(DEVICE).transpose(1, 2)
    kv = torch.randn(b, s, 2, 1, d, generator=gen).to(DEVICE)
    k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous() and k.stride(-1) == 1
    do = torch.randn(b, s, h, d, generator=gen).to(DEVICE).transpose(1, 2)
    got = kernel_grads(q, k, v, do, causal=True)
    assert_grads_close(got, q, k, v, do, causal=True)

    ones = torch.ones((), device=DEVICE).expand(b, h, s, d)  # what out.sum().backward() sends
    got = kernel_grads(q, k, v, ones, causal=False)
    assert_grads_close(got, q, k, v, ones.contiguous(), causal=False)


def test_needs_skips_unwanted_grads():
    q, k, v, do = make_inputs(1, 2, 1, 37, 37, 32, F32, seed=7)
    full = kernel_grads(q, k, v, do, causal=True)
    for needs in [(True, False, False), (False, True, False), (False, False, True)]:
        got = kernel_grads(q, k, v, do, causal=True, needs=needs)
        for want, g, f in zip(needs, got, full, strict=True):
            if want:
                assert torch.equal(g, f)
            else:
                assert g is None
    assert kernel_grads(q, k, v, do, causal=True, needs=(False, False, False)) == (None,) * 3


def test_inputs_without_requires_grad_get_no_grad():
    q, k, v, do = make_inputs(1, 2, 2, 37, 37, 32, F32, seed=8)
    q = q.requires_grad_()
    k = k.requires_grad_(False)
    v = v.requires_grad_()
    attention(q, k, v, causal=True).backward(do)
    assert k.grad is None and q.grad is not None and v.grad is not None
    assert_grads_close([q.grad, None, v.grad], q, k, v, do, causal=True)


def test_backward_is_deterministic():
    """GQA sums over the group inside one program: two runs give identical bits."""
    q, k, v, do = make_inputs(1, 4, 1, 70, 70, 64, F16, seed=9)
    first = kernel_grads(q, k, v, do, causal=True)
    second = kernel_grads(q, k, v, do, causal=True)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)


def _launch_names(monkeypatch):
    """The kernel names every `Launch` call runs from now on, in order."""
    launched = []
    real_call = Launch.__call__

    def call(self, *args):
        launched.append(self.kernel.fn.__name__)
        return real_call(self, *args)

    monkeypatch.setattr(Launch, "__call__", call)
    return launched


def _grads_with(monkeypatch, launched, env, value, q, k, v, do, causal, **kw):
    """`kernel_grads` from a new plan with the environment variable `env` set to `value`,
    checked against float64; `launched` (a `_launch_names` list) then holds this call's
    launches only."""
    monkeypatch.setenv(env, value)
    bwd_module._plans.clear()
    launched.clear()
    grads = kernel_grads(q, k, v, do, causal=causal, **kw)
    assert_grads_close(grads, q, k, v, do, causal=causal)
    return grads


@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.parametrize(
    "dtype,d,sq,sk,causal,hq,hkv",
    [_case(F32, 40, 37, 53, True, 4, 2), _case(F16, 64, 70, 37, False, 2, 1)],
)
def test_dq_kernel_computing_delta(monkeypatch, tma, dtype, d, sq, sk, causal, hq, hkv):
    """Where the dQ and dK/dV kernels run on one stream (always on the CPU) a call without
    extras launches attn_bwd_dq_delta, which computes delta itself, and no preprocess kernel;
    FLASHGEN_BWD_OWN_DELTA=0 keeps the preprocess launch. Both match float64 and each other."""
    monkeypatch.setenv("FLASHGEN_BWD_TMA", "1" if tma else "0")
    q, k, v, do = make_inputs(2, hq, hkv, sq, sk, d, dtype, seed=5)
    launched = _launch_names(monkeypatch)
    results = {}
    for own in ("1", "0"):
        results[own] = _grads_with(
            monkeypatch, launched, "FLASHGEN_BWD_OWN_DELTA", own, q, k, v, do, causal
        )
        suffix = "_tma" if tma else ""
        if own == "1":
            assert launched == [f"attn_bwd_dq_delta{suffix}", f"attn_bwd_dkdv{suffix}"]
        else:
            assert launched[0] == "attn_bwd_preprocess" and len(launched) == 3
    for a, b in zip(results["1"], results["0"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * max(1.0, b.abs().max().item()))
    bwd_module._plans.clear()


def _short_here(dtype) -> bool:
    """Whether this device runs attn_bwd_short for `dtype` (`bwd._short`): the interpreter for
    every dtype, CUDA for 16-bit inputs on sm_90."""
    if DEVICE == "cpu":
        return True
    return dtype != F32 and torch.cuda.get_device_capability()[0] == 9


@pytest.mark.parametrize(
    "dtype,d,sq,sk,causal,hq,hkv",
    [
        _case(F32, 64, 128, 128, True, 1, 1),
        _case(F32, 40, 37, 53, True, 4, 2),
        _case(F32, 32, 256, 128, False, 2, 2),
        _case(F16, 128, 5, 128, True, 3, 1),
        _case(BF16, 64, 200, 19, False, 2, 2),
        _case(F32, 16, 1, 1, True, 2, 1),
    ],
)
def test_short_backward_is_one_launch(monkeypatch, dtype, d, sq, sk, causal, hq, hkv):
    """A call without extras whose keys fit one block (<= SHORT_MAX_K) and queries a few
    (<= SHORT_MAX_STEPS blocks a kv head's program), its tiles chosen at run time, runs the
    whole backward as one launch of attn_bwd_short (odd lengths, both causal ways, GQA, padded
    head dims, more queries than keys and fewer): it matches float64, repeats bit for bit, and
    matches the two split kernels it replaces (FLASHGEN_BWD_SHORT=0)."""
    q, k, v, do = make_inputs(2, hq, hkv, sq, sk, d, dtype, seed=11)
    launched = _launch_names(monkeypatch)
    results = {}
    for short in ("1", "0"):
        results[short] = _grads_with(
            monkeypatch, launched, "FLASHGEN_BWD_SHORT", short, q, k, v, do, causal, config=None
        )
        if short == "1" and _short_here(dtype):
            assert launched == ["attn_bwd_short"]
        else:
            assert "attn_bwd_short" not in launched and len(launched) >= 2
    # the short kernel again, from a new plan and then from the kept one: the same bits
    once = _grads_with(
        monkeypatch, launched, "FLASHGEN_BWD_SHORT", "1", q, k, v, do, causal, config=None
    )
    twice = kernel_grads(q, k, v, do, causal=causal, config=None)
    if _short_here(dtype):
        assert launched == ["attn_bwd_short"] * 2
    for a, b, first, split in zip(once, twice, results["1"], results["0"], strict=True):
        assert torch.equal(a, b) and torch.equal(a, first)
        tol = 1e-5 if dtype == F32 else 2e-2
        torch.testing.assert_close(
            a, split, rtol=tol, atol=tol * max(1.0, split.abs().max().item())
        )
    bwd_module._plans.clear()


_SHORT_AOT = """
import json, sys
sys.path.insert(0, "benchmarks")
from sram_vs_compiler import compile_ahead
from flashgen.core.spec import KernelSpec
from flashgen.kernels.bwd import SHORT_BLOCK_M, SHORT_MAX_K, SHORT_MAX_STEPS, short_config
shared = []
for d, causal, dtype in json.loads(sys.argv[1]):
    spec = KernelSpec(d, causal, dtype, "bwd")
    cfg = short_config(spec, SHORT_MAX_STEPS * SHORT_BLOCK_M, SHORT_MAX_K)
    kernel, _ = compile_ahead(spec, "attn_bwd_short", cfg, 90)
    shared.append(kernel.metadata.shared)
print(json.dumps(shared))
"""


def test_short_backward_fits_sm90_at_its_largest_tiles():
    """attn_bwd_short at the tiles of the longest call it takes (SHORT_MAX_STEPS blocks of
    queries, SHORT_MAX_K keys),
    compiled for sm_90 ahead of time (no GPU), fits the H100/H200's shared memory for the
    16-bit head dims up to 128 (`bwd._short` takes it on CUDA there only)."""
    import aot_compile

    from flashgen.hardware.sram import KNOWN_GPUS

    if not aot_compile.cuda_backend_available():
        pytest.skip("Triton's CUDA backend is not installed")
    jobs = [[64, True, "bfloat16"], [128, False, "float16"], [128, True, "bfloat16"]]
    shared = aot_compile.run_without_interpreter(_SHORT_AOT, jobs, timeout=600)
    limit = KNOWN_GPUS["nvidia-h200"].smem_optin_bytes
    assert len(shared) == 3 and all(0 < b <= limit for b in shared), shared


_STEPS_Q = bwd_module.SHORT_MAX_STEPS * bwd_module.SHORT_BLOCK_M


@pytest.mark.parametrize(
    "b,hq,hkv,sq,sk,needs,config",
    [
        (1, 2, 2, 37, bwd_module.SHORT_MAX_K + 1, (True, True, True), None),
        (1, 2, 2, _STEPS_Q + 1, 37, (True, True, True), None),
        (1, 4, 2, _STEPS_Q // 2 + 1, 37, (True, True, True), None),
        (67, 4, 2, 65, 16, (True, True, True), None),
        (1, 2, 2, 37, 53, (True, False, False), None),
        (1, 2, 2, 37, 53, (False, True, True), None),
        (1, 2, 2, 37, 53, (True, True, True), SMALL),
    ],
    ids=["long-keys", "long-queries", "gqa-walk", "programs", "dq-only", "no-dq",
         "explicit-config"],
)  # fmt: skip
def test_calls_the_short_backward_does_not_take(monkeypatch, b, hq, hkv, sq, sk, needs, config):
    """Longer keys than one block, a program walk of more than SHORT_MAX_STEPS (query head,
    query block) steps (long queries, or GQA heads times blocks), more than SHORT_WIDE_STEPS
    with more programs than the planned GPU's SMs (4 steps, 132 SMs: 67 x 2 kv heads), a call
    that wants dQ alone (one launch already)
    or no dQ, and an explicit TileConfig (tests and benchmarks naming the split kernels'
    tiles) run the split kernels."""
    q, k, v, do = make_inputs(b, hq, hkv, sq, sk, 16, F16, seed=12)
    launched = _launch_names(monkeypatch)
    bwd_module._plans.clear()
    got = kernel_grads(q, k, v, do, causal=True, config=config, needs=needs)
    assert launched and "attn_bwd_short" not in launched
    assert_grads_close(got, q, k, v, do, causal=True)
    bwd_module._plans.clear()


def test_short_backward_takes_many_programs_of_two_steps(monkeypatch):
    """Past the SM count (67 x 2 kv heads on the planned 132), a walk of SHORT_WIDE_STEPS steps
    still runs attn_bwd_short (GQA 2, one query block), and matches float64."""
    if not _short_here(F16):
        pytest.skip("this GPU does not run attn_bwd_short")
    q, k, v, do = make_inputs(67, 4, 2, 20, 16, 16, F16, seed=14)
    launched = _launch_names(monkeypatch)
    bwd_module._plans.clear()
    got = kernel_grads(q, k, v, do, causal=False, config=None)
    assert launched == ["attn_bwd_short"]
    assert_grads_close(got, q, k, v, do, causal=False)
    bwd_module._plans.clear()


def test_short_plan_looks_up_no_config(monkeypatch):
    """A short call's plan takes its own tiles (`short_config`): it asks neither the records
    nor the defaults (`plans.plan_config`, which would fail here)."""
    if not _short_here(F16):
        pytest.skip("this GPU does not run attn_bwd_short")

    def no_lookup(*args):
        raise AssertionError("plan_config called for a short plan")

    monkeypatch.setattr(bwd_module, "plan_config", no_lookup)
    q, k, v, do = make_inputs(1, 2, 2, 33, 17, 32, F16, seed=15)
    launched = _launch_names(monkeypatch)
    _grads_with(monkeypatch, launched, "FLASHGEN_BWD_SHORT", "1", q, k, v, do, True, config=None)
    assert launched == ["attn_bwd_short"]
    bwd_module._plans.clear()


def test_short_backward_writes_every_element(monkeypatch):
    """attn_bwd_short's dQ, dK and dV come from torch.empty_like without the deterministic
    mode's fill; with the fill kept on (NaN in every new element) the gradients are still
    exact, so the kernel wrote every element (ragged blocks, padded head dim, GQA)."""
    if not _short_here(F16):
        pytest.skip("this GPU does not run attn_bwd_short")
    q, k, v, do = make_inputs(1, 4, 2, 45, 37, 40, F16, seed=13)
    launched = _launch_names(monkeypatch)
    monkeypatch.setattr(bwd_module, "pause_fill", lambda: False)
    bwd_module._plans.clear()
    torch.use_deterministic_algorithms(True)
    try:
        got = kernel_grads(q, k, v, do, causal=True, config=None)
    finally:
        torch.use_deterministic_algorithms(False)
    assert launched == ["attn_bwd_short"]
    assert_grads_close(got, q, k, v, do, causal=True)
    bwd_module._plans.clear()


@pytest.mark.parametrize(
    "kind,deterministic", [("split", False), ("onepass", False), ("onepass", True)]
)
@pytest.mark.parametrize(
    "needs", [(True, True, True), (False, True, True), (True, False, False)], ids=str
)
def test_backward_plain_equals_backward(monkeypatch, kind, deterministic, needs):
    """`bwd.backward_plain` (the plain eager path's launcher) gives bit for bit what
    `backward` gives, from a plan built once and then hit (FLASHGEN_BWD_KIND=onepass asked
    for, deterministic or not: the plan runs the kind `backward` runs); tensors it does not take (a
    non-contiguous dO) and a `hopper_bwd.AUTO` entry that may take the key length go to
    `backward`."""
    from flashgen.kernels import hopper_bwd

    monkeypatch.setenv("FLASHGEN_BWD_KIND", kind)
    q, k, v, do = make_inputs(2, 4, 2, 37, 53, 32, F32, seed=3)
    _, out, lse = reference_grads(q, k, v, do, causal=True, scale=0.2)
    out, lse = out.float(), lse.float()
    bwd_module._plans.clear()
    want = backward(do, q, k, v, out, lse, causal=True, scale=0.2, config=SMALL, needs=needs,
                    deterministic=deterministic)  # fmt: skip

    def plain(do):
        return bwd_module.backward_plain(
            do, q, k, v, out, lse, True, 0.2, SMALL, needs, deterministic
        )

    def plain_keys():
        return [key for key in bwd_module._plans if key[0] == bwd_module._PLAIN]

    for _ in range(2):  # the plan's first call, then a hit
        got = plain(do)
        (key,) = plain_keys()
        onepass = kind == "onepass" and not deterministic and needs[0]
        assert (bwd_module._plans[key].onepass is not None) == onepass
        for a, b in zip(got, want, strict=True):
            assert (a is None and b is None) or torch.equal(a, b)
    bwd_module._plans.clear()
    strided = torch.empty(*do.shape, 2)[..., 0].copy_(do)  # last-dim stride 2
    got = plain(strided)
    assert not plain_keys()
    for a, b in zip(got, want, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)
    monkeypatch.setattr(hopper_bwd, "AUTO", {(32, True): 1 << 30})
    plain(do)  # an entry for longer keys only: the plain path
    assert len(plain_keys()) == 1
    bwd_module._plans.clear()
    monkeypatch.setattr(hopper_bwd, "AUTO", {(32, True): 53})
    plain(do)  # an entry that may take these keys: `backward`
    assert not plain_keys()
    bwd_module._plans.clear()


def test_empty_batch():
    q, k, v, do = make_inputs(0, 2, 1, 5, 5, 32, F32)
    dq, dk, dv = backward(do, q, k, v, q, q.new_empty((0, 2, 5)), causal=True, scale=0.5)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
def test_gradcheck_float32():
    """Finite differences through forward and backward kernels (the spec has no float64
    kernels, so float32 with matching step and tolerances, on a tiny shape)."""
    gen = torch.Generator().manual_seed(10)
    q, k, v = (
        (torch.randn(1, 2, 5, 16, generator=gen) * 0.5).to(DEVICE).requires_grad_()
        if i == 0
        else (torch.randn(1, 1, 6, 16, generator=gen) * 0.5).to(DEVICE).requires_grad_()
        for i in range(3)
    )
    assert torch.autograd.gradcheck(
        lambda q, k, v: attention(q, k, v, causal=True),
        (q, k, v),
        eps=1e-2,
        atol=2e-3,
        rtol=2e-2,
        fast_mode=True,
        nondet_tol=0.0,
    )


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"d{d}")
def test_backward_bf16_gpu(d, causal, tma):
    """Real bf16 tensor-core arithmetic (the interpreter cannot check this): our forward's
    out/lse feed our backward, explicit configs (no tuning database needed)."""
    from flashgen.kernels.fwd import forward

    q, k, v, do = make_inputs(2, 4, 2, 300, 257, d, BF16, seed=11)
    cfg = TileConfig(64, 64, 4, 2)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=cfg)
    got = backward(do, q, k, v, out, lse, causal=causal, scale=d**-0.5, config=cfg, tma=tma)
    assert_grads_close(got, q, k, v, do, causal=causal)


@pytest.mark.parametrize("dtype", [F32, F16], ids=["f32", "f16"])
def test_backward_peaked_softmax(dtype):
    """Large logits (near one-hot rows, very negative scores elsewhere): no overflow, no NaN."""
    q, k, v, do = make_inputs(1, 2, 1, 45, 70, 64, dtype, seed=12)
    q = (q.float() * 6).to(dtype)
    got = kernel_grads(q, k, v, do, causal=True)
    assert_grads_close(got, q, k, v, do, causal=True)


@pytest.mark.parametrize(
    "extra",
    [{}, {"window": True}, {"softcap": True}, {"lengths": True}, {"attn_mask": "bool"},
     {"attn_mask": "add"}, {"dropout": True}, {"alibi": True},
     {"lengths": True, "packed": True}],
    ids=lambda e: "-".join(f"{k}" for k in e) or "plain",
)  # fmt: skip
def test_dq_delta_kernels_are_rendered_exactly_for_specs_without_extras(extra):
    """The template's own rule for rendering attn_bwd_dq_delta[_tma] (`own_delta_kernels`) is
    the one `flashgen.kernels.bwd` launches them by (`KernelSpec.has_extras`): a spec the
    launcher asks them of always has them, and no other spec carries them."""
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels.codegen import render

    spec = KernelSpec(64, False, "float16", "bwd", **extra)
    source = render(spec)
    for name in ("attn_bwd_dq_delta(", "attn_bwd_dq_delta_tma("):
        assert (f"def {name}" in source) == (not spec.has_extras), (spec.uri(), name)
