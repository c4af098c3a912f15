"""Packed variable-length sequences (issue 16): `flashgen.attention_varlen` on the CPU
interpreter against float64, one sequence at a time.

Each case packs sequences of odd and unequal lengths (one of length 1, one without keys or
without queries where the case says so) along one dim, as FlashAttention's varlen API takes
them; the reference runs plain float64 attention on each sequence's slices and leaves rows of
no sequence at zero. Forward and gradients of q, k and v; causal, sliding windows, softcap and
GQA; small tiles so sequences start and end inside blocks and the grid has blocks past a
sequence's end. Bf16 numerics need the GPU (the `gpu` test).
"""

from __future__ import annotations

import math

import pytest
import torch

import flashgen
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels import varlen
from flashgen.runtime import varlen as _ops  # noqa: F401  (registers the varlen ops)

TILES = TileConfig(16, 16, 4, 1)


def ref_varlen(q, k, v, cu_q, cu_k, *, causal, window=None, softcap=None, scale=None):
    """float64 [Tq, Hq, D]: attention within each packed sequence; rows of none, and rows that
    see no key, are 0. `window` (left, right) as the kernels take it, in local positions."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    for b in range(len(cu_q) - 1):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if qe == qs:
            continue
        qb = q[qs:qe].transpose(0, 1)
        kb = k[ks:ke].transpose(0, 1).repeat_interleave(group, 0)
        vb = v[ks:ke].transpose(0, 1).repeat_interleave(group, 0)
        s = (qb @ kb.transpose(-1, -2)) * scale
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(qe - qs, device=q.device)[:, None]
        j = torch.arange(ke - ks, device=q.device)[None, :]
        seen = torch.ones(qe - qs, ke - ks, dtype=torch.bool, device=q.device)
        if causal:
            seen &= j <= i
        if window is not None:
            seen &= (j >= i - window[0]) & (j <= i + window[1])
        p = torch.softmax(s.masked_fill(~seen, float("-inf")), -1).nan_to_num(0.0)
        out[qs:qe] = (p @ vb).transpose(0, 1)
    return out


def _packed(lens_q, lens_k, hq, hkv, d, dtype=torch.float32, extra_q=0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    cu_q = torch.tensor([0, *torch.tensor(lens_q).cumsum(0).tolist()], dtype=torch.int32)
    cu_k = torch.tensor([0, *torch.tensor(lens_k).cumsum(0).tolist()], dtype=torch.int32)
    tq, tk = int(cu_q[-1]) + extra_q, int(cu_k[-1])
    q = torch.randn(tq, hq, d, generator=gen).to(dtype)
    k = torch.randn(tk, hkv, d, generator=gen).to(dtype)
    v = torch.randn(tk, hkv, d, generator=gen).to(dtype)
    return q, k, v, cu_q, cu_k


CASES = [
    # name, query lengths, key lengths, hq, hkv, d, causal, window, softcap, rows of no sequence
    ("self-causal-gqa", [37, 1, 45], [37, 1, 45], 2, 1, 32, True, None, None, 0),
    ("self-full", [20, 45, 3], [20, 45, 3], 2, 2, 16, False, None, None, 0),
    ("cross-nokeys-tail", [17, 9, 30], [40, 0, 23], 2, 1, 40, False, None, None, 5),
    ("causal-window", [50, 33], [50, 33], 2, 1, 32, True, 9, None, 0),
    ("two-sided-softcap", [41, 19], [41, 19], 2, 2, 32, False, (7, 4), 20.0, 0),
    ("noqueries", [0, 29, 0], [12, 29, 5], 2, 1, 16, True, None, None, 0),
]


def _id(case):
    return case[0]


@pytest.mark.parametrize(
    ("case", "tma_build"),
    [*((c, "0") for c in CASES), (CASES[2], "1"), (CASES[4], "1")],
    ids=lambda x: x[0] if isinstance(x, tuple) else {"0": "pointers", "1": "tma"}[x],
)
def test_varlen_forward_backward_match_float64(case, tma_build, monkeypatch):
    """tma_build "1": the descriptor builds of the forward (pointer stores) and the backward,
    loading at batch coordinate 0 of the packed tensors (they read rows of the neighbouring
    sequences, masked like ragged rows)."""
    _, lq, lk, hq, hkv, d, causal, window, softcap, extra = case
    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma_build)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma_build)
    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    q, k, v, cu_q, cu_k = _packed(lq, lk, hq, hkv, d, extra_q=extra)
    for t in (q, k, v):
        t.requires_grad_(True)
    out = flashgen.attention_varlen(
        q, k, v, cu_q, cu_k, causal=causal, window=window, softcap=softcap
    )
    kernel_window = flashgen.kernels.validate.normalize_window(window, causal)
    ref_in = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    ref = ref_varlen(*ref_in, cu_q, cu_k, causal=causal, window=kernel_window, softcap=softcap)
    assert out.shape == q.shape and not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    if extra:
        assert (out[-extra:] == 0).all()
    do = torch.randn_like(out)
    out.backward(do)
    ref.backward(do.double())
    for name, got, want in zip("qkv", (q.grad, k.grad, v.grad), ref_in, strict=True):
        assert not torch.isnan(got).any(), name
        torch.testing.assert_close(got.double(), want.grad, atol=5e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("cap", [20.0, 60.0], ids=["fixed_max", "running_max"])
def test_packed_softcap_at_the_caps_ends(cap, monkeypatch):
    """Packed sequences take FIXED_MAX (no running max) where the cap allows, as the padded
    launch does: rows whose every score sits at +cap or -cap in one sequence beside ordinary
    rows in the other, against float64."""
    from flashgen.kernels import plans

    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    asked = []
    real = varlen.fixed_max
    monkeypatch.setattr(
        varlen, "fixed_max", lambda spec, c: asked.append(real(spec, c)) or asked[-1]
    )
    q, k, v, cu_q, cu_k = _packed([30, 25], [30, 25], 2, 1, 32)
    k = k + 4.0  # every key leans the same way
    q[:10] = -40.0  # scores about -900 in the first sequence: tanh at -1
    q[10:20] = 40.0  # and at +1
    out = flashgen.attention_varlen(q, k, v, cu_q, cu_k, causal=True, softcap=cap)
    ref = ref_varlen(q.double(), k.double(), v.double(), cu_q, cu_k, causal=True, softcap=cap)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    assert asked == [plans.small_cap(cap, "float32")] == [cap == 20.0]


def test_varlen_fp16_matches_float64(monkeypatch):
    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    q, k, v, cu_q, cu_k = _packed([29, 40], [29, 40], 2, 1, 32, dtype=torch.float16)
    out = flashgen.attention_varlen(q, k, v, cu_q, cu_k, 40, 40, causal=True)
    ref = ref_varlen(q, k, v, cu_q, cu_k, causal=True)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=0)


def test_varlen_under_autocast_runs_in_its_dtype(monkeypatch):
    """Under `torch.autocast` to float16 float32 q, k and v are cast as `flashgen.attention`
    casts them (SDPA's rule): a float16 output matching float64 of the cast inputs (on the GPU
    where there is one: the cast is the same, the kernels compiled)."""
    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v, cu_q, cu_k = (t.to(device) for t in _packed([29, 40], [29, 40], 2, 1, 32))
    with torch.autocast(q.device.type, dtype=torch.float16):
        out = flashgen.attention_varlen(q, k, v, cu_q, cu_k, 40, 40, causal=True)
    ref = ref_varlen(q.half(), k.half(), v.half(), cu_q, cu_k, causal=True)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=0)


def test_packed_equals_padded_batch(monkeypatch):
    """The same sequences through the padded-batch kernels (key_lengths) give the same rows:
    packing changes where rows live, not what they see."""
    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    lens = [23, 40, 7]
    q, k, v, cu_q, cu_k = _packed(lens, lens, 2, 2, 16)
    out = flashgen.attention_varlen(q, k, v, cu_q, cu_k, causal=True)
    pad = torch.zeros(3, 2, 40, 16), torch.zeros(3, 2, 40, 16), torch.zeros(3, 2, 40, 16)
    for b, n in enumerate(lens):
        s = slice(int(cu_q[b]), int(cu_q[b + 1]))
        for dst, src in zip(pad, (q, k, v), strict=True):
            dst[b, :, :n] = src[s].transpose(0, 1)
    padded = flashgen.attention(*pad, causal=True, key_lengths=lens, query_lengths=lens)
    for b, n in enumerate(lens):
        s = slice(int(cu_q[b]), int(cu_q[b + 1]))
        torch.testing.assert_close(out[s], padded[b, :, :n].transpose(0, 1), atol=1e-5, rtol=1e-5)


def test_spec_uri_round_trip_and_rules():
    spec = KernelSpec(128, True, "bfloat16", "fwd", lengths=True, packed=True)
    assert spec.uri() == "attn_fwd_d128_causalpack_bf16"
    assert KernelSpec.from_uri(spec.uri()) == spec
    assert spec.with_direction("bwd").packed and spec.sibling().packed
    win = KernelSpec(64, False, "float16", "bwd", window=True, softcap=True, lengths=True,
                     packed=True)  # fmt: skip
    assert KernelSpec.from_uri(win.uri()) == win
    with pytest.raises(ValueError, match="packed needs lengths"):
        KernelSpec(64, False, "float16", packed=True)
    with pytest.raises(ValueError, match="packed needs lengths"):
        KernelSpec(64, False, "float16", lengths=True, dropout=True, packed=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cu_seqlens_q": torch.tensor([0, 5, 3])}, "cu_seqlens_q must start at 0, never decrease"),
        ({"cu_seqlens_k": torch.tensor([0, 4, 99])}, "cu_seqlens_k must .* end at most at 10"),
        ({"cu_seqlens_q": torch.tensor([0.0, 5.0, 8.0])}, "cu_seqlens_q must have an integer"),
        ({"cu_seqlens_k": torch.tensor([0, 10])}, "the same shape"),
        ({"max_seqlen_q": -1}, "max_seqlen_q must be an int >= 0"),
        ({"q": torch.randn(1, 8, 2, 16)}, "q must be a 3-D tensor"),
        ({"window": 3}, "needs causal=True"),
    ],
    ids=["decreasing", "past-end", "float", "shapes", "max", "4d", "window"],
)
def test_varlen_errors_name_the_argument(kwargs, match):
    args = {
        "q": torch.randn(8, 2, 16),
        "k": torch.randn(10, 1, 16),
        "v": torch.randn(10, 1, 16),
        "cu_seqlens_q": torch.tensor([0, 5, 8]),
        "cu_seqlens_k": torch.tensor([0, 4, 10]),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        flashgen.attention_varlen(**args)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_varlen_bf16_on_gpu(causal):
    torch.manual_seed(0)
    lens = [1000, 1, 517, 2048, 35]
    q, k, v, cu_q, cu_k = _packed(lens, lens, 8, 2, 128, dtype=torch.bfloat16)
    q, k, v = (t.cuda().requires_grad_(True) for t in (q, k, v))
    out = flashgen.attention_varlen(q, k, v, cu_q.cuda(), cu_k.cuda(), causal=causal)
    ref_in = [t.detach().double().cpu().requires_grad_(True) for t in (q, k, v)]
    ref = ref_varlen(*ref_in, cu_q, cu_k, causal=causal)
    do = torch.randn_like(out)
    out.backward(do)
    ref.backward(do.double().cpu())
    scale = ref.abs().max().item()
    assert (out.double().cpu() - ref).abs().max().item() <= 2e-2 * scale
    for got, want in zip((q.grad, k.grad, v.grad), ref_in, strict=True):
        g = want.grad
        assert (got.double().cpu() - g).abs().max().item() <= 2e-2 * g.abs().max().item()


def test_varlen_ops_opcheck(monkeypatch):
    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    q, k, v, cu_q, cu_k = _packed([9, 14], [9, 14], 2, 1, 16)
    q4, k4, v4 = (t.transpose(0, 1).unsqueeze(0) for t in (q, k, v))
    bounds = varlen.packed_bounds(cu_q, cu_k)
    args = (q4, k4, v4, bounds, 14, 14, True, 0.25)
    torch.library.opcheck(torch.ops.flashgen.attention_varlen_fwd.default, args)
    out, lse = torch.ops.flashgen.attention_varlen_fwd(*args)
    bargs = (torch.randn_like(out), q4, k4, v4, out, lse, bounds, 14, 14, True, 0.25, [3, 0])
    torch.library.opcheck(torch.ops.flashgen.attention_varlen_bwd.default, bargs)


def test_varlen_under_compile_dynamic_matches_eager(monkeypatch):
    """Compiled (dynamic): two packed batches of other lengths run in one graph (no recompile
    per length), forward and gradients equal to the eager call's."""
    from torch._dynamo.testing import CompileCounterWithBackend

    monkeypatch.setattr(varlen, "_config", lambda config, spec: TILES)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")

    def f(q, k, v, cu, n):
        return flashgen.attention_varlen(q, k, v, cu, cu, n, n, causal=True).square().sum()

    compiled = torch.compile(f, backend=counter, dynamic=True, fullgraph=True)
    for lens in ([11, 20], [17, 2, 9]):
        q, k, v, cu, _ = _packed(lens, lens, 2, 1, 16, seed=len(lens))
        leaves = [t.requires_grad_() for t in (q, k, v)]
        got = compiled(q, k, v, cu, max(lens))
        got_grads = torch.autograd.grad(got, leaves)
        want = f(q, k, v, cu, max(lens))
        want_grads = torch.autograd.grad(want, leaves)
        torch.testing.assert_close(got, want)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w)
    assert counter.frame_count == 1


def test_kernel_cli_prints_the_packed_kernel(capsys):
    from flashgen.cli import main

    assert main(["kernel", "--head-dim", "64", "--causal", "--packed", "--direction", "bwd"]) == 0
    source = capsys.readouterr().out
    assert "# Kernel: attn_bwd_d64_causalpack_" in source and "TOTAL_Q, TOTAL_K" in source
    assert main(["kernel", "--head-dim", "64", "--packed", "--family", "hopper"]) == 2
    assert "portable kernels only" in capsys.readouterr().err
