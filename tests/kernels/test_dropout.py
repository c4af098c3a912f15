"""Attention dropout in the kernels (flashgen.kernels.dropout): forward and backward against a
float64 reference that applies the keep mask `dropout.keep_mask` draws for the same seed.

The mask is a pure function of (seed, position), so the reference can be exact: out =
(P o Z) V / (1 - p) with P the undropped softmax, and the gradients of that expression."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import flashgen
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels import dropout
from flashgen.kernels.bwd import backward
from flashgen.kernels.dropout_ref import keep_tile, threshold_of
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import bounds, dense_mask
from flashgen.kernels.reference import expand_kv, scores_ref

TILES = TileConfig(16, 16, 4, 1)
SEED = 2**40 + 12_345


def _inputs(b, hq, hkv, sq, sk, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=gen) for h, s in ((hq, sq), (hkv, sk), (hkv, sk))]


def dropped_ref(q, k, v, visible, keep, p, softcap=None):
    """float64 (P o keep) V / (1 - p) under a boolean visibility mask; empty rows give 0."""
    s = scores_ref(q, k, softcap=softcap)
    probs = torch.softmax(s.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
    return (probs * keep / (1 - p)) @ expand_kv(v.double(), q.shape[1])


CASES = [
    # b, hq, hkv, sq, sk, d, causal, p, window, softcap, lengths (padding, key, query)
    (2, 4, 2, 37, 45, 32, False, 0.3, None, None, None),
    (2, 2, 2, 53, 53, 16, True, 0.1, None, None, None),
    (1, 4, 1, 61, 61, 40, True, 0.5, (9, 0), 5.0, None),
    (3, 2, 1, 37, 45, 32, False, 0.2, None, None, ("left", [45, 20, 0], [37, 11, 5])),
    (3, 4, 2, 53, 53, 16, True, 0.25, (12, 0), None, ("right", [53, 30, 17], [53, 30, 17])),
]


def _id(c):
    parts = [f"{c[3]}x{c[4]}", "causal" if c[6] else "full", f"p{c[7]}"]
    parts += ["win"] if c[8] else []
    parts += ["cap"] if c[9] else []
    parts += [f"pad{c[10][0]}"] if c[10] else []
    return "-".join(parts)


@pytest.mark.parametrize("tma", [False, True], ids=["pointers", "tma"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_backward_match_float64(case, tma, monkeypatch):
    b, hq, hkv, sq, sk, d, causal, p, window, cap, pad = case
    if tma and pad is None:
        monkeypatch.setenv("FLASHGEN_FWD_TMA", "1")
    q, k, v = _inputs(b, hq, hkv, sq, sk, d)
    seq_bounds = None
    if pad is not None:
        seq_bounds = bounds(b, sq, sk, pad[1], pad[2], pad[0], "cpu")
        visible = dense_mask(seq_bounds, sq, sk, causal=causal, window=window)
    else:
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        visible = torch.ones(sq, sk, dtype=torch.bool)
        if causal:
            visible &= j <= i
        if window is not None:
            visible &= (j >= i - window[0]) & (j <= i + window[1])
    starts = None if seq_bounds is None else seq_bounds[:, 2].tolist()  # keys count from there
    keep = dropout.keep_mask(SEED, p, b, hq, sq, sk, "cpu", key_starts=starts)
    # roughly the asked fraction is dropped (thousands of draws)
    assert abs((1 - keep[visible.expand_as(keep)].float().mean().item()) - p) < 0.05
    kw = dict(causal=causal, config=TILES, window=window, softcap=cap, bounds=seq_bounds,
              dropout=(p, SEED))  # fmt: skip
    out, lse = forward(q, k, v, scale=None, **kw)
    ref = dropped_ref(q, k, v, visible, keep, p, cap)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    grads = backward(do, q, k, v, out, lse, scale=1 / math.sqrt(d), tma=tma, **kw)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(dropped_ref(qd, kd, vd, visible, keep, p, cap), (qd, kd, vd),
                               do.double())  # fmt: skip
    for name, got, exp in zip(("dq", "dk", "dv"), grads, want, strict=True):
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4, msg=name)


def test_the_mask_depends_on_the_seed_and_position_only():
    a = dropout.keep_mask(SEED, 0.5, 2, 3, 17, 19, "cpu")
    assert torch.equal(a, dropout.keep_mask(SEED, 0.5, 2, 3, 17, 19, "cpu"))
    assert not torch.equal(a, dropout.keep_mask(SEED + 1, 0.5, 2, 3, 17, 19, "cpu"))
    # a lower rate keeps a superset (the same uniform draws against a lower threshold)
    assert (dropout.keep_mask(SEED, 0.2, 2, 3, 17, 19, "cpu") >= a).all()


def _rate_tolerance(p: float, n: int) -> float:
    """Six standard deviations of the kept fraction of n independent draws."""
    return 6 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_the_draws_are_uniform_and_unrelated_between_neighbours(p):
    """keep_tile hashes each score's position: over a tile of 64 rows x 1024 keys (and the
    rows of the next head) the kept fraction is 1 - p, and two neighbouring keys, rows or
    heads agree as often as independent draws do (p^2 + (1 - p)^2)."""
    keep = dropout.keep_mask(SEED, p, 1, 2, 64, 1024, "cpu").float()
    n = keep.numel()
    assert abs(keep.mean().item() - (1 - p)) < _rate_tolerance(p, n)
    chance = p * p + (1 - p) * (1 - p)
    tol = _rate_tolerance(chance, n // 2)
    pairs = {
        "keys": (keep[..., :-1], keep[..., 1:]),
        "rows": (keep[..., :-1, :], keep[..., 1:, :]),
        "heads": (keep[:, 0], keep[:, 1]),
        "keys 8 apart": (keep[..., :-8], keep[..., 8:]),
    }
    for name, (a, b) in pairs.items():
        agree = (a == b).float().mean().item()
        assert abs(agree - chance) < tol, (name, agree, chance)
    # every key position and every row drops at the rate, not just the tile on average
    per_key = keep[0, 0].mean(0)  # 64 draws each
    assert (per_key - (1 - p)).abs().max() < _rate_tolerance(p, 64) * 1.5


def test_the_rate_resolves_finely_and_every_seed_and_row_bit_counts():
    """The threshold is p * 2**32: a tiny p drops almost nothing, a p near 1 keeps almost
    nothing; the seed's high half and the flat row's high half change the draw (a seed or a
    row 2**32 apart is another mask)."""
    tiny = dropout.keep_mask(SEED, 1e-6, 1, 1, 64, 1024, "cpu")
    assert tiny.float().mean() > 0.999
    nearly = dropout.keep_mask(SEED, 0.999, 1, 1, 64, 1024, "cpu")
    assert 0 < nearly.float().mean() < 0.003
    a = dropout.keep_mask(SEED, 0.5, 1, 1, 16, 64, "cpu")
    assert not torch.equal(a, dropout.keep_mask(SEED + 2**32, 0.5, 1, 1, 16, 64, "cpu"))
    rows = torch.tensor([5, 5 + 2**32, 5 + 2**33], dtype=torch.int64)
    flags = _keep_rows(SEED, rows, 0.5, 64)
    assert not torch.equal(flags[0], flags[1]) and not torch.equal(flags[0], flags[2])


def _lowbias32(x, last=True):
    """Chris Wellons' lowbias32 on uint64 numpy arrays holding uint32 values."""
    m = np.uint64(0xFFFFFFFF)
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & m
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & m
    return x ^ (x >> np.uint64(16)) if last else x


def test_the_draw_is_the_documented_hash():
    """keep_mask's flags against the draw written out in numpy from its definition
    (dropout_ref.keep_tile): row r's key R = lowbias32(lowbias32(lo(r) ^ lo(s)) ^ hi(r) ^ hi(s)),
    key j kept iff lowbias32-without-its-last-xorshift(R ^ j * 0x9E3779B9 mod 2**32) >=
    p * 2**32. Pins the draw itself, which the backward must redraw and which the kernels
    compute in pieces (the first xorshift split between the row's and the key's halves)."""
    seed, p, rows, keys = SEED, 0.3, 2 * 3 * 17, 70
    flags = dropout.keep_mask(seed, p, 2, 3, 17, keys, "cpu").reshape(rows, keys).numpy()
    m = np.uint64(0xFFFFFFFF)
    r = np.arange(rows, dtype=np.uint64)
    s_lo, s_hi = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    row_key = _lowbias32(_lowbias32(r & m ^ s_lo) ^ (r >> np.uint64(32)) ^ s_hi)
    code = (np.arange(keys, dtype=np.uint64) * np.uint64(0x9E3779B9)) & m
    draw = _lowbias32(row_key[:, None] ^ code[None, :], last=False)
    threshold = np.uint64(int(np.float32(p) * np.float32(2.0**32)))
    expected = draw >= threshold
    assert 0.6 < expected.mean() < 0.8
    np.testing.assert_array_equal(flags, expected)


@triton.jit(do_not_specialize=["seed"])
def _keep_rows_kernel(Rows, Out, seed, p, N: tl.constexpr, K: tl.constexpr):
    r = tl.load(Rows + tl.arange(0, N))
    keep = keep_tile(seed, r, 0, threshold_of(p), K)
    tl.store(Out + tl.arange(0, N)[:, None] * K + tl.arange(0, K)[None, :], keep.to(tl.int8))


def _keep_rows(seed: int, rows: torch.Tensor, p: float, seq_k: int) -> torch.Tensor:
    """keep_tile's flags for arbitrary flat rows (int64, any magnitude), keys 0..seq_k-1."""
    out = torch.empty(4, seq_k, dtype=torch.int8)
    padded = torch.cat([rows, rows[-1:].expand(4 - rows.numel())])
    _keep_rows_kernel[(1,)](padded, out, seed, p, N=4, K=seq_k)
    return out[: rows.numel()].bool()


def test_public_function_reproduces_under_manual_seed_and_matches_the_reference():
    q, k, v = (t.requires_grad_() for t in _inputs(2, 4, 2, 29, 29, 16, seed=3))
    torch.manual_seed(11)
    out = flashgen.attention(q, k, v, causal=True, dropout_p=0.2)
    torch.manual_seed(11)
    seed = int(dropout.new_seed().item())  # the draw the call made
    torch.manual_seed(11)
    again = flashgen.attention(q, k, v, causal=True, dropout_p=0.2)
    assert torch.equal(out, again)
    assert not torch.equal(out, flashgen.attention(q, k, v, causal=True, dropout_p=0.2))
    visible = torch.ones(29, 29, dtype=torch.bool).tril()
    keep = dropout.keep_mask(seed, 0.2, 2, 4, 29, 29, "cpu")
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = dropped_ref(qd, kd, vd, visible, keep, 0.2)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=1e-4)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(ref, (qd, kd, vd), do.double())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4)


def test_zero_probability_is_the_plain_kernel():
    q, k, v = _inputs(1, 2, 2, 20, 20, 16)
    plain = flashgen.attention(q, k, v, causal=True)
    assert torch.equal(flashgen.attention(q, k, v, causal=True, dropout_p=0.0), plain)


@pytest.mark.parametrize("bad", [1.0, -0.1, float("nan"), True, "0.1"])
def test_bad_probability_names_the_argument(bad):
    q, k, v = _inputs(1, 2, 2, 8, 8, 16)
    with pytest.raises(ValueError, match="dropout_p"):
        flashgen.attention(q, k, v, dropout_p=bad)


def test_spec_uri_round_trip_and_kinds():
    from flashgen.kernels import bwd_kind, hopper

    spec = KernelSpec(64, True, "bfloat16", "fwd", window=True, dropout=True)
    assert spec.uri() == "attn_fwd_d64_causalwindrop_bf16"
    assert KernelSpec.from_uri(spec.uri()) == spec
    # the Hopper forward has dropout, taken only when forced (not measured on a GPU yet)
    assert "dropout" in hopper.spec_reason(spec) and "only when forced" in hopper.spec_reason(spec)
    assert hopper.spec_reason(spec, forced=True) == hopper.gluon_api()[1]
    assert not bwd_kind.onepass_supported(spec.with_direction("bwd"))


def test_the_seed_is_checked():
    with pytest.raises(ValueError, match="dropout_seed"):
        dropout.launch_args(0.1, None)
    with pytest.raises(ValueError, match="dropout_seed"):
        dropout.launch_args(0.1, torch.tensor([1], dtype=torch.int32))
    assert dropout.launch_args(0.0, None) is None


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_tuner_checks_a_candidate_with_dropout(direction):
    """`flashgen tune --dropout` times and checks the dropout kernel with p = 0 (every draw is
    kept, so the undropped reference holds while the kernel pays for the mask)."""
    from flashgen.hardware.costmodel import Shape
    from flashgen.tune.bench import bench_dropout, check

    spec = KernelSpec(32, True, "float32", direction, dropout=True)
    assert bench_dropout(spec)[0] == 0.0 and bench_dropout(spec.with_direction("fwd")) is not None
    assert check(spec, TILES, Shape(2, 2, 1, 45, 45), "cpu").status == "ok"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bf16_on_gpu(causal):
    """bf16 forward and backward on the GPU through the public op against float64 with the
    mask the call drew (the seed redrawn from the same generator state)."""
    b, hq, hkv, n, d = 2, 8, 2, 1003, 128
    q, k, v = (t.cuda().to(torch.bfloat16).requires_grad_() for t in _inputs(b, hq, hkv, n, n, d))
    torch.manual_seed(3)
    out = flashgen.attention(q, k, v, causal=causal, dropout_p=0.1)
    torch.manual_seed(3)
    keep = dropout.keep_mask(int(dropout.new_seed().item()), 0.1, b, hq, n, n, "cuda")
    visible = torch.ones(n, n, dtype=torch.bool, device="cuda")
    if causal:
        visible = visible.tril()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = dropped_ref(*leaves, visible, keep, 0.1)
    assert (out.double() - ref).abs().max().item() <= 2e-2 * max(1.0, ref.abs().max().item())
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    want = torch.autograd.grad(ref, leaves, do.double())
    for name, g, w in zip(("dq", "dk", "dv"), got, want, strict=True):
        err = (g.double() - w).abs().max().item()
        assert err <= 3e-2 * max(1.0, w.abs().max().item()), f"{name}: {err:.3e}"


def test_a_short_query_with_dropout_runs_the_forward_kernels():
    """Queries of <= 16 rows go to the decode kernels, which have no dropout: with dropout_p
    they take the forward kernels (and drop)."""
    q, k, v = _inputs(1, 2, 2, 4, 40, 16, seed=5)
    out = flashgen.attention(q, k, v, dropout_p=0.5)
    plain = flashgen.attention(q, k, v)
    assert out.shape == plain.shape and not torch.allclose(out, plain)
