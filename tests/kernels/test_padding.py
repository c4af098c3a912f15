"""Key and query padding through per-sequence valid ranges (issue 16), on the CPU interpreter.

Forward and backward against a float64 reference that applies the same ranges as a dense mask
(`flashgen.kernels.padding.dense_mask`): right and left padding, causal and not, GQA, odd and
unequal lengths, a sequence with no valid key and one with no valid query row (zeros, never
NaN), combined with a sliding window and a softcap; small tiles so that blocks outside the
valid range are skipped and the edge blocks masked. Also the public `flashgen.attention`
arguments (errors name the argument), autograd, torch.compile(dynamic=True) and opcheck.
Bf16 numerics need the GPU (the `gpu` test at the end).
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
from flashgen.kernels.padding import bounds, dense_mask
from flashgen.kernels.reference import rows_ref, scores_ref
from flashgen.ops import attention

TILES = TileConfig(16, 16, 4, 1)


def masked_ref(q, k, v, mask, *, scale=None, softcap=None):
    """float64 attention under a boolean mask [B or 1, 1, Sq, Sk]; rows that see nothing: 0."""
    s = scores_ref(q, k, scale=scale, softcap=softcap)
    return rows_ref(s.masked_fill(~mask, float("-inf")), v)[0]


def _inputs(b, hq, hkv, sq, sk, d, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(dtype)
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


CASES = [
    # b, hq, hkv, sq, sk, d, causal, padding, key lengths, query lengths
    (3, 2, 1, 37, 45, 32, False, "right", [45, 20, 0], None),
    (3, 2, 1, 37, 45, 32, False, "left", [45, 20, 1], [37, 11, 0]),
    (3, 4, 2, 53, 53, 16, True, "right", [53, 30, 17], None),
    (3, 4, 2, 53, 53, 16, True, "left", [53, 30, 17], [53, 30, 17]),
    (2, 2, 2, 101, 64, 40, True, "right", [64, 33], [101, 50]),
]


def _ids(case):
    return f"b{case[0]}-{case[3]}x{case[4]}-{'causal' if case[6] else 'full'}-{case[7]}"


@pytest.mark.parametrize("bwd_tma", [False, True], ids=["bwd-pointers", "bwd-tma"])
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_backward_match_float64(case, bwd_tma):
    """bwd_tma: the backward's descriptor build, which loads tiles at rows q_start + m and
    k_start + n and so reads the padding of the sequence (masked like ragged rows)."""
    b, hq, hkv, sq, sk, d, causal, side, klen, qlen = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d)
    seq_bounds = bounds(b, sq, sk, klen, qlen, side, "cpu")
    mask = dense_mask(seq_bounds, sq, sk, causal=causal)
    out, lse = forward(q, k, v, causal=causal, scale=None, config=TILES, bounds=seq_bounds)
    ref = masked_ref(q, k, v, mask)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    # rows outside the valid range, and rows seeing no key, are exactly zero with lse = +inf
    empty = ~mask.any(-1).expand(b, hq, sq)
    assert (out[empty] == 0).all() and (lse[empty] == float("inf")).all()

    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=causal, scale=1 / math.sqrt(d), config=TILES,
                     bounds=seq_bounds, tma=bwd_tma)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(masked_ref(qd, kd, vd, mask), (qd, kd, vd), do.double())
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want, strict=True):
        assert not torch.isnan(got).any(), name
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("side", ["right", "left"])
def test_window_and_softcap_inside_the_valid_range(side):
    """A causal window and a softcap apply in positions counted from the range's start."""
    b, hq, hkv, n, d = 2, 2, 1, 61, 16
    q, k, v = _inputs(b, hq, hkv, n, n, d, seed=4)
    lens = [61, 40]
    seq_bounds = bounds(b, n, n, lens, lens, side, "cpu")
    mask = dense_mask(seq_bounds, n, n, causal=True, window=(6, 0))
    out, lse = forward(q, k, v, causal=True, scale=None, config=TILES, window=(6, 0),
                       softcap=5.0, bounds=seq_bounds)  # fmt: skip
    ref = masked_ref(q, k, v, mask, softcap=5.0)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, causal=True, scale=1 / math.sqrt(d), config=TILES,
                     window=(6, 0), softcap=5.0, bounds=seq_bounds)  # fmt: skip
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(masked_ref(qd, kd, vd, mask, softcap=5.0), (qd, kd, vd), do.double())
    for got, exp in zip(grads, want, strict=True):
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4)


def test_public_function_with_autograd_matches_a_padded_batch():
    """`flashgen.attention(key_lengths=..., query_lengths=..., padding="left")`, a decoder
    batch: the valid rows equal attention over each sequence alone, gradients included, and
    padded rows and their gradients are zero."""
    b, hq, hkv, n, d = 2, 4, 2, 45, 32
    q, k, v = (t.requires_grad_() for t in _inputs(b, hq, hkv, n, n, d, seed=2))
    lens = torch.tensor([45, 19])
    out = attention(q, k, v, causal=True, key_lengths=lens, query_lengths=lens, padding="left")
    out.sum().backward()
    # entry 1 alone: its last 19 positions, plain causal attention
    qs, ks, vs = (t.detach()[1:, :, -19:].clone().requires_grad_() for t in (q, k, v))
    alone = attention(qs, ks, vs, causal=True)
    alone.sum().backward()
    torch.testing.assert_close(out[1:, :, -19:], alone, atol=2e-5, rtol=1e-4)
    assert (out[1, :, :-19] == 0).all()
    torch.testing.assert_close(q.grad[1:, :, -19:], qs.grad, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(k.grad[1:, :, -19:], ks.grad, atol=5e-5, rtol=1e-4)
    assert (q.grad[1, :, :-19] == 0).all() and (k.grad[1, :, :-19] == 0).all()


def test_padding_differs_from_no_padding():
    """The lengths really cut keys off (a kernel ignoring them would fail here)."""
    q, k, v = _inputs(1, 1, 1, 40, 40, 16, seed=5)
    padded = attention(q, k, v, key_lengths=[10])
    plain = attention(q, k, v)
    assert (padded - plain).abs().max() > 1e-2
    torch.testing.assert_close(padded, attention(q, k[:, :, :10], v[:, :, :10]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key_lengths": [3]}, r"key_lengths must have shape \[batch\] = \[2\]"),
        ({"key_lengths": torch.tensor([3.0, 4.0])}, "key_lengths must have an integer dtype"),
        ({"key_lengths": [3, -1]}, "key_lengths must be >= 0"),
        ({"key_lengths": [3, 18]}, "key_lengths must be <= the sequence length 17"),
        ({"key_lengths": "3"}, "key_lengths must be a 1-D integer tensor"),
        ({"query_lengths": [3, 1.5]}, "query_lengths must hold ints"),
        ({"key_lengths": [3, 4], "padding": "both"}, "padding must be 'right' or 'left'"),
        ({"padding": "top"}, "padding must be 'right' or 'left'"),
        ({"key_lengths": [3, 4], "causal": True, "padding": "left"}, "query_lengths: causal"),
        ({"key_lengths": [3, 4], "impl": "sdpa_efficient"}, "run flashgen's kernels only"),
    ],
)
def test_bad_lengths_name_the_argument(kwargs, message):
    assert_refused(_inputs(2, 1, 1, 17, 17, 16), kwargs, message)


def test_spec_uri_round_trip():
    for spec in (
        KernelSpec(64, True, "float16", "bwd", lengths=True),
        KernelSpec(64, False, "bfloat16", lengths=True, window=True, softcap=True),
    ):
        assert KernelSpec.from_uri(spec.uri()) == spec
    assert KernelSpec(64, False, "float16", lengths=True).uri() == "attn_fwd_d64_fulllen_f16"
    assert (
        KernelSpec(64, True, "bfloat16", lengths=True, softcap=True).uri()
        == "attn_fwd_d64_causallencap_bf16"
    )


def test_op_under_compile_dynamic_and_opcheck():
    """Lengths under torch.compile(fullgraph=True, dynamic=True) at two sizes, and opcheck."""

    def f(q, k, v, lens):
        return attention(q, k, v, causal=True, key_lengths=lens, query_lengths=lens) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for n in (23, 41):
        q, k, v = (t.requires_grad_() for t in _inputs(2, 2, 1, n, n, 16, seed=n))
        lens = torch.tensor([n, n - 9])
        out = compiled(q, k, v, lens)
        mask = dense_mask(bounds(2, n, n, lens, lens, "right", "cpu"), n, n, causal=True)
        torch.testing.assert_close(out.double(), 2 * masked_ref(q, k, v, mask), atol=2e-5,
                                   rtol=1e-4)  # fmt: skip
        out.sum().backward()
        qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
        (2 * masked_ref(qd, kd, vd, mask)).sum().backward()
        torch.testing.assert_close(q.grad.double(), qd.grad, atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(v.grad.double(), vd.grad, atol=5e-5, rtol=1e-4)
    q, k, v = _inputs(2, 2, 1, 19, 19, 16)
    sb = bounds(2, 19, 19, [19, 7], None, "left", "cpu")
    torch.library.opcheck(
        torch.ops.flashgen.attention_fwd.default,
        (q, k, v, False, 0.25, None, None, "top_left", sb),
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal,side", [(False, "right"), (True, "left")])
def test_bf16_on_gpu(causal, side):
    """Forward and backward in bf16 (on an H100/H200: the Hopper forward and the backward's
    descriptor build, both reading tiles at the sequences' starts) against float64."""
    q, k, v = (t.cuda() for t in _inputs(3, 8, 2, 1003, 1003, 128, torch.bfloat16, seed=7))
    lens = torch.tensor([1003, 517, 0], device="cuda")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal, key_lengths=lens, query_lengths=lens, padding=side)
    mask = dense_mask(bounds(3, 1003, 1003, lens, lens, side, "cuda"), 1003, 1003, causal=causal)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = masked_ref(*ref_leaves, mask)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, do)
    want = torch.autograd.grad(ref, ref_leaves, do.double())
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want, strict=True):
        err = (got.double() - exp).abs().max().item()
        assert err <= 3e-2 * max(1.0, exp.abs().max().item()), f"{name}: {err:.3e}"


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_tuner_checks_a_candidate_with_lengths(direction):
    """`flashgen tune` on a spec with lengths (e.g. from --pending) checks the kernel itself,
    every row valid (`flashgen.tune.bench.bench_bounds`)."""
    from flashgen.hardware.costmodel import Shape
    from flashgen.tune.bench import bench_bounds, check

    spec = KernelSpec(32, True, "float32", direction, lengths=True)
    assert check(spec, TILES, Shape(2, 2, 1, 45, 45), "cpu").status == "ok"
    q, k, _ = _inputs(2, 2, 1, 45, 30, 32)
    assert bench_bounds(spec, q, k).tolist() == [[0, 45, 0, 30], [0, 45, 0, 30]]
    assert bench_bounds(KernelSpec(32, True, "float32", direction), q, k) is None
