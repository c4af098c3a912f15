"""ALiBi computed in the portable kernels (issue 16): `flashgen.attention(alibi_slopes=)` adds
slope_h * (j - i) to the scaled scores, forward and backward, against a float64 reference:
odd lengths (37 x 53), GQA, causal both ways, slopes [H] and [B, H], with a window, softcap,
lengths and an additive mask beside it, both kernel builds; the spec flag and its uri, the
tuner's check, the argument errors, the routing (never SDPA) and the op
under torch.compile. Bf16 numerics on the GPU (`gpu` tests)."""

from __future__ import annotations

import pytest
import torch

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels.alibi import bias_ref, standard_slopes
from flashgen.kernels.reference import hidden_ref, rows_ref, scores_ref
from flashgen.ops import attention


def _inputs(b, hq, hkv, sq, sk, d, *, seed=0, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).to(device, dtype).requires_grad_()
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


def _slopes(b, h, per_batch, device="cpu"):
    slopes = standard_slopes(h).to(device)
    if per_batch:  # a different set per batch entry, some negative
        slopes = torch.stack([slopes * (1.0 - 0.7 * i) for i in range(b)])
    return slopes


def alibi_ref(q, k, v, slopes, *, causal=False, window=None, softcap=None, mask=None):
    """float64 out of attention with the ALiBi bias slope * (j - i) (after a softcap)."""
    s = scores_ref(q, k, softcap=softcap) + bias_ref(slopes.to(q.device), q.shape[2], k.shape[2])
    if mask is not None:
        s = s + mask.double()
    hide = hidden_ref(q.shape[2], k.shape[2], causal=causal, window=window).to(q.device)
    return rows_ref(s.masked_fill(hide, float("-inf")), v)[0]


def _check(q, k, v, slopes, *, atol=2e-5, grad_atol=5e-5, **kw):
    """Forward and the gradients of q, k, v against float64."""
    ref_kw = {name: kw[name] for name in ("causal", "softcap", "mask") if name in kw}
    if "window" in kw:  # Mistral's int window w: keys i - w < j <= i
        ref_kw["window"] = (kw["window"] - 1, 0)
    call_kw = {name: value for name, value in kw.items() if name != "mask"}
    if "mask" in kw:
        call_kw["attn_mask"] = kw["mask"]
    out = attention(q, k, v, alibi_slopes=slopes, **call_kw)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = alibi_ref(*leaves, slopes, **ref_kw)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=atol, rtol=1e-4)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), g.to(out.device, out.dtype))
    exp = torch.autograd.grad(want, leaves, g.to(want.device))
    for name, a, b in zip(("dq", "dk", "dv"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), b, atol=grad_atol, rtol=1e-4, msg=name)


CASES = [
    # b, hq, hkv, sq, sk, d, causal, per-batch slopes
    (2, 4, 2, 37, 53, 16, False, False),  # GQA, odd lengths, Sq < Sk
    (2, 4, 2, 37, 53, 16, True, True),
    (1, 2, 2, 53, 37, 32, True, False),  # Sq > Sk, causal
    (2, 2, 1, 40, 40, 24, False, True),  # padded head dim
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_forward_and_gradients_match_float64(case):
    b, hq, hkv, sq, sk, d, causal, per_batch = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, d, seed=sq + sk)
    _check(q, k, v, _slopes(b, hq, per_batch), causal=causal)


@pytest.mark.parametrize("tma", ["0", "1"])
def test_both_kernel_builds(tma, monkeypatch):
    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    monkeypatch.setenv("FLASHGEN_BWD_TMA", tma)
    q, k, v = _inputs(1, 4, 2, 33, 47, 16, seed=3)
    _check(q, k, v, _slopes(1, 4, True), causal=True)


def test_with_window_softcap_and_an_additive_mask():
    q, k, v = _inputs(2, 2, 1, 41, 41, 16, seed=7)
    slopes = _slopes(2, 2, False)
    _check(q, k, v, slopes, causal=True, window=9, softcap=2.0)
    mask = torch.randn(41, 41, generator=torch.Generator().manual_seed(1))
    _check(q, k, v, slopes, mask=mask)


def test_beside_a_learned_bias_with_its_gradient():
    """An additive mask that requires grad (its gradient from the dQ kernel's walk) beside the
    slopes: every gradient, the bias's too, against float64."""
    q, k, v = _inputs(1, 2, 1, 29, 35, 16, seed=13)
    slopes = _slopes(1, 2, True)
    bias = torch.randn(1, 2, 29, 35, generator=torch.Generator().manual_seed(3)).requires_grad_()
    out = attention(q, k, v, causal=True, alibi_slopes=slopes, attn_mask=bias)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(4))
    got = torch.autograd.grad(out, (q, k, v, bias), g)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v, bias)]
    want = alibi_ref(*leaves[:3], slopes, causal=True, mask=leaves[3])
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    exp = torch.autograd.grad(want, leaves, g.double())
    for name, a, b in zip(("dq", "dk", "dv", "dbias"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), b, atol=5e-5, rtol=1e-4, msg=name)


def test_with_dropout():
    """Dropout beside the slopes: the keep mask the kernels draw for the call's seed
    (`flashgen.kernels.dropout.keep_mask`) applied to the biased probabilities, forward and
    gradients against float64."""
    from flashgen.kernels import dropout

    q, k, v = _inputs(1, 4, 2, 29, 29, 16, seed=17)
    slopes = _slopes(1, 4, False)
    torch.manual_seed(11)
    out = attention(q, k, v, causal=True, dropout_p=0.2, alibi_slopes=slopes)
    torch.manual_seed(11)
    keep = dropout.keep_mask(int(dropout.new_seed().item()), 0.2, 1, 4, 29, 29, "cpu")
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s = scores_ref(leaves[0], leaves[1]) + bias_ref(slopes, 29, 29)
    probs = torch.softmax(s.masked_fill(hidden_ref(29, 29, causal=True), float("-inf")), -1)
    want = (probs * keep / 0.8) @ leaves[2].repeat_interleave(2, 1)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    got = torch.autograd.grad(out, (q, k, v), g)
    exp = torch.autograd.grad(want, leaves, g.double())
    for name, a, b in zip(("dq", "dk", "dv"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), b, atol=5e-5, rtol=1e-4, msg=name)


def test_with_key_lengths_positions_are_local():
    """With key/query lengths the positions count from each valid range's start (as the causal
    mask does): left padding shifts nothing. Forward and gradients, entry by entry."""
    q, k, v = _inputs(2, 2, 2, 24, 24, 16, seed=11)
    slopes = _slopes(2, 2, False)
    lengths = [24, 17]
    out = attention(q, k, v, causal=True, alibi_slopes=slopes, key_lengths=lengths,
                    query_lengths=lengths, padding="left")  # fmt: skip
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad(out, (q, k, v), g)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    for b, n in enumerate(lengths):
        rows = slice(24 - n, 24)
        qb, kb, vb = (t[b : b + 1, :, rows] for t in leaves)
        want = alibi_ref(qb, kb, vb, slopes, causal=True)
        torch.testing.assert_close(out[b : b + 1, :, rows].detach().double(), want.detach(),
                                   atol=2e-5, rtol=1e-4)  # fmt: skip
        want.backward(g[b : b + 1, :, rows].double())
    for name, a, w in zip(("dq", "dk", "dv"), got, leaves, strict=True):
        torch.testing.assert_close(a.double(), w.grad, atol=5e-5, rtol=1e-4, msg=name)


def test_zero_slopes_equal_plain_attention_and_slopes_matter():
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 37, 37, 16, seed=2))
    plain = attention(q, k, v, causal=True)
    zero = attention(q, k, v, causal=True, alibi_slopes=torch.zeros(2))
    torch.testing.assert_close(zero, plain, atol=1e-6, rtol=1e-5)
    biased = attention(q, k, v, causal=True, alibi_slopes=standard_slopes(2))
    assert (biased - plain).abs().max() > 0.05


def test_spec_flag_and_uri():
    spec = KernelSpec(128, True, "bfloat16", "fwd", alibi=True)
    assert spec.uri() == "attn_fwd_d128_causalalibi_bf16"
    full = KernelSpec(64, False, "float16", "bwd", True, True, True, "add", True, alibi=True)
    assert full.uri() == "attn_bwd_d64_winlenbiasalibicapdrop_f16"
    for s in (spec, full, full.with_direction("fwd"), spec.sibling()):
        assert KernelSpec.from_uri(s.uri()) == s and s.alibi
    with pytest.raises(ValueError, match="alibi"):
        KernelSpec(64, False, "float16", lengths=True, packed=True, alibi=True)


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_tuner_checks_an_alibi_candidate(direction):
    from flashgen.hardware.costmodel import Shape
    from flashgen.tune.bench import check

    spec = KernelSpec(32, True, "float32", direction, alibi=True)
    assert check(spec, TileConfig(16, 16, 4, 1), Shape(1, 2, 1, 40, 40), "cpu").status == "ok"


@pytest.mark.parametrize(
    "slopes,kwargs,match",
    [
        (torch.ones(3), {}, r"alibi_slopes must have shape \[heads\] = \[2\]"),
        (torch.ones(2, dtype=torch.float64), {}, "alibi_slopes must be float32"),
        ([0.5, 0.25], {}, "alibi_slopes must be a tensor"),
        (torch.ones(2, requires_grad=True), {}, r"alibi_slopes requires grad.*detach"),
        (torch.ones(2), {"impl": "sdpa_efficient"}, "alibi_slopes run flashgen's kernels only"),
    ],
)
def test_argument_errors_name_alibi_slopes(slopes, kwargs, match):
    q, k, v = (t.detach() for t in _inputs(1, 2, 2, 20, 30, 16))
    with pytest.raises(ValueError, match=match):
        attention(q, k, v, alibi_slopes=slopes, **kwargs)


@pytest.mark.impl_choice
def test_never_routed_to_sdpa(monkeypatch):
    """A call with the slopes runs flashgen's kernels with the bias even where the environment
    forces an SDPA backend (SDPA has no ALiBi): a short query the decode kernels
    (tests/kernels/test_decode_alibi.py), a longer one the forward kernels."""
    monkeypatch.setenv("FLASHGEN_IMPL", "sdpa_efficient")
    slopes = standard_slopes(4)
    for sq in (3, 29):
        q, k, v = (t.detach() for t in _inputs(1, 4, 2, sq, 37, 16, seed=4))
        out = attention(q, k, v, alibi_slopes=slopes)
        want = alibi_ref(q, k, v, slopes)
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)


def test_op_under_compile_dynamic():
    def f(q, k, v, slopes):
        return attention(q, k, v, causal=True, alibi_slopes=slopes) * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    slopes = standard_slopes(2)
    for sq in (19, 27):
        q, k, v = _inputs(1, 2, 1, sq, sq, 16, seed=sq)
        out = compiled(q, k, v, slopes)
        want = 2 * alibi_ref(*(t.detach() for t in (q, k, v)), slopes, causal=True)
        torch.testing.assert_close(out.detach().double(), want, atol=4e-5, rtol=1e-4)
        out.sum().backward()
        assert q.grad is not None and not q.grad.isnan().any()
    q, k, v = (t.detach() for t in _inputs(1, 2, 1, 19, 30, 16))
    torch.library.opcheck(
        torch.ops.flashgen.attention_fwd.default,
        (q, k, v, True, 0.25, None, None, "top_left", None, None, 0.0, None, slopes),
    )


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("per_batch", [False, True])
def test_bf16_on_gpu(causal, per_batch):
    q, k, v = _inputs(2, 8, 2, 1001, 1537, 128, seed=9, dtype=torch.bfloat16, device="cuda")
    _check_bf16(q, k, v, _slopes(2, 8, per_batch, "cuda"), causal)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper family needs an sm_90 GPU",
)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_forward_on_gpu(head_dim, causal, monkeypatch):
    """The Hopper family's ALiBi (taken when forced): its forward, then the portable backward
    from its out and lse, against float64 within twice SDPA's own bf16 error."""
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    q, k, v = _inputs(2, 8, 2, 1100, 1100, head_dim, seed=4, dtype=torch.bfloat16, device="cuda")
    spec = KernelSpec(head_dim, causal, "bfloat16", "fwd", alibi=True)
    assert hopper.choose(spec, q, k, v, q.shape[2])  # must not silently run the portable one
    _check_bf16(q, k, v, _slopes(2, 8, True, "cuda"), causal)


def _check_bf16(q, k, v, slopes, causal):
    """bf16 against float64, each error bounded by twice what PyTorch's SDPA makes in bf16 on
    the same inputs given the dense bias (plus a small floor): with non-causal slopes up to 0.5
    over 1537 keys the bias reaches hundreds, the softmax piles onto the last keys and dK grows
    large, so a fixed absolute tolerance would measure bf16's rounding, not the kernel."""
    import torch.nn.functional as F

    group = q.shape[1] // k.shape[1]
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(5)).to("cuda", q.dtype)
    out = attention(q, k, v, alibi_slopes=slopes, causal=causal)
    ours = (out, *torch.autograd.grad(out, (q, k, v), g))
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = alibi_ref(*leaves, slopes, causal=causal)
    exact = (want, *torch.autograd.grad(want, leaves, g.double()))
    bias = bias_ref(slopes, q.shape[2], k.shape[2])
    if causal:
        bias = bias.masked_fill(
            torch.ones_like(bias[0, 0], dtype=torch.bool).triu(1), float("-inf")
        )
    kx, vx = (
        t.repeat_interleave(group, 1) for t in (k, v)
    )  # GQA, as SDPA's attn_mask path takes it
    theirs_out = F.scaled_dot_product_attention(q, kx, vx, attn_mask=bias.to(q.dtype))
    dq, dkx, dvx = torch.autograd.grad(theirs_out, (q, kx, vx), g)
    fold = lambda t: t.unflatten(1, (k.shape[1], group)).sum(2)  # noqa: E731  (the group's sum)
    theirs = (theirs_out, dq, fold(dkx.float()), fold(dvx.float()))
    for name, a, b, ref in zip(("out", "dq", "dk", "dv"), ours, theirs, exact, strict=True):
        err = (a.double() - ref).abs().max().item()
        sdpa_err = (b.double() - ref).abs().max().item()
        assert err <= 2 * sdpa_err + 1e-2, f"{name}: {err:.3e} vs SDPA bf16 {sdpa_err:.3e}"


@pytest.mark.gpu
def test_float32_gqa_odd_lengths_on_gpu():
    q, k, v = _inputs(2, 4, 2, 37, 53, 64, seed=1, device="cuda")
    _check(q, k, v, _slopes(2, 4, True, "cuda"), causal=True, atol=1e-4, grad_atol=2e-4)


LSE_CASES = [
    # b, hq, hkv, sq, sk, causal, per-batch slopes
    (2, 4, 2, 37, 53, False, True),  # GQA, odd lengths, Sq < Sk
    (2, 4, 2, 53, 37, True, False),  # Sq > Sk, causal
    (1, 2, 1, 41, 41, True, True),
]


@pytest.mark.parametrize("tma", ["0", "1"])
@pytest.mark.parametrize("case", LSE_CASES, ids=lambda c: "x".join(map(str, c)))
def test_forward_lse_is_the_biased_logsumexp(case, tma, monkeypatch):
    """The forward adds only the bias's per-key part slope * (j - start_m) to each tile and
    takes the per-row rest off the stored lse (issue 16): that lse must equal float64's
    logsumexp of the fully biased scaled scores, row by row. 16-row query blocks, so rows sit
    up to 15 below their block's first row (an uncorrected lse is off by slope * 15 there)."""
    from flashgen.kernels import fwd

    monkeypatch.setenv("FLASHGEN_FWD_TMA", tma)
    b, hq, hkv, sq, sk, causal, per_batch = case
    q, k, v = (t.detach() for t in _inputs(b, hq, hkv, sq, sk, 16, seed=sq * sk))
    slopes = _slopes(b, hq, per_batch)
    out, lse = fwd.forward(q, k, v, causal=causal, scale=None, config=TileConfig(16, 16, 4, 1),
                           alibi=slopes.expand(b, hq))  # fmt: skip
    s = scores_ref(q, k) + bias_ref(slopes, sq, sk)
    s = s.masked_fill(hidden_ref(sq, sk, causal=causal), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), rows_ref(s, v.double())[0], atol=2e-5, rtol=1e-4)


def test_forward_lse_with_a_mask_hiding_whole_rows():
    """An additive mask beside the slopes (a banded kernel: every tile masked): the lse of
    every row against float64, and a row whose keys the mask hides all keeps lse = +inf and a
    zero output (the lse correction must not move it)."""
    from flashgen.kernels import fwd

    q, k, v = (t.detach() for t in _inputs(1, 2, 1, 35, 45, 16, seed=21))
    slopes = _slopes(1, 2, True)
    mask = torch.randn(1, 2, 35, 45, generator=torch.Generator().manual_seed(6))
    mask[:, :, 20] = float("-inf")
    out, lse = fwd.forward(q, k, v, causal=False, scale=None, config=TileConfig(16, 16, 4, 1),
                           mask=mask, alibi=slopes)  # fmt: skip
    want = torch.logsumexp(scores_ref(q, k) + bias_ref(slopes, 35, 45) + mask.double(), -1)
    assert torch.isinf(lse[:, :, 20]).all() and (lse[:, :, 20] > 0).all()
    assert (out[:, :, 20] == 0).all()
    keep = torch.arange(35) != 20
    torch.testing.assert_close(lse[:, :, keep].double(), want[:, :, keep], atol=2e-5, rtol=1e-5)


# Steep, negative, shallow and near-zero slopes: over a few hundred keys the first's bias
# reaches ~170 (not causal, its rows' weight sits on a few keys at the far end), and so does
# the lse: its fp32 rounding alone moves a row's probabilities by ~1e-5 relative, hence the
# gradients' atol 1e-4 below (dv summed over a few hundred rows came to ~0.9 of 5e-5).
LONG_SLOPES = torch.tensor([0.5, -0.3, 2**-4, 2**-8])
LONG_CASES = [
    # b, hq, hkv, sq, sk, causal
    (1, 4, 2, 333, 333, False),  # GQA, six 64-key blocks, the last ragged
    (1, 4, 2, 517, 517, True),
    (1, 4, 2, 389, 301, True),  # Sq > Sk
    (1, 4, 2, 301, 389, False),  # Sq < Sk
]


@pytest.mark.parametrize("case", LONG_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gradients_over_many_blocks_match_float64(case):
    """Forward and dq/dk/dv against float64 over several query and key blocks, ragged at both
    ends, GQA, Sq above and below Sk, with steep, negative, shallow and near-zero slopes (a
    bias that grows over the blocks tests where each kernel puts j - i)."""
    b, hq, hkv, sq, sk, causal = case
    q, k, v = _inputs(b, hq, hkv, sq, sk, 16, seed=sq + sk)
    _check(q, k, v, LONG_SLOPES, causal=causal, grad_atol=1e-4)


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("tiles", [(32, 64), (64, 16)], ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("causal", [False, True])
def test_backward_alone_with_unequal_tiles(causal, tiles, tma):
    """The backward kernels alone, given float64's out and lse (rounded to fp32), with query
    and key blocks of different sizes (a block-size mix-up in either kernel's positions shows
    here): dq/dk/dv against float64."""
    from flashgen.kernels import bwd

    sq, sk, d = 203, 181, 16
    q, k, v = (t.detach() for t in _inputs(1, 4, 2, sq, sk, d, seed=31))
    slopes = LONG_SLOPES.expand(1, 4)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    s = scores_ref(leaves[0], leaves[1]) + bias_ref(slopes, sq, sk)
    out, lse = rows_ref(s.masked_fill(hidden_ref(sq, sk, causal=causal), float("-inf")), leaves[2])
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    exp = torch.autograd.grad(out, leaves, do)
    got = bwd.backward(do.float(), q, k, v, out.detach().float(), lse.detach().float(),
                       causal=causal, scale=d**-0.5, config=TileConfig(*tiles, 4, 1), tma=tma,
                       alibi=slopes)  # fmt: skip
    for name, a, e in zip(("dq", "dk", "dv"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), e, atol=1e-4, rtol=1e-4, msg=name)


def test_backward_with_a_mask_hiding_whole_rows():
    """An additive mask beside the slopes hides every key of one row (lse +inf): that row's
    dq is exactly 0 and adds nothing to dk/dv; the other rows' gradients against float64, over
    several key blocks."""
    sq, sk = 150, 170
    q, k, v = _inputs(1, 2, 1, sq, sk, 16, seed=23)
    slopes = _slopes(1, 2, True)
    mask = torch.randn(1, 2, sq, sk, generator=torch.Generator().manual_seed(9))
    mask[:, :, 70] = float("-inf")
    out = attention(q, k, v, alibi_slopes=slopes, attn_mask=mask)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(10))
    got = torch.autograd.grad(out, (q, k, v), g)
    assert all(torch.isfinite(t).all() for t in got)
    assert (got[0][:, :, 70] == 0).all() and (out[:, :, 70] == 0).all()
    keep = torch.arange(sq) != 70
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s = scores_ref(*leaves[:2]) + bias_ref(slopes, sq, sk) + mask.double()
    want = rows_ref(s[:, :, keep], leaves[2])[0]
    exp = torch.autograd.grad(want, leaves, g[:, :, keep].double())
    torch.testing.assert_close(
        out[:, :, keep].detach().double(), want.detach(), atol=2e-5, rtol=1e-4
    )
    for name, a, e in zip(("dq", "dk", "dv"), got, exp, strict=True):
        torch.testing.assert_close(a.double(), e, atol=5e-5, rtol=1e-4, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the Hopper family needs an sm_90 GPU",
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("grid", ["plain", "static", "dynamic"])
@pytest.mark.parametrize("causal", [False, True])
def test_hopper_alibi_over_every_grid_matches_float64(dtype, grid, causal):
    """The Hopper family's ALiBi renderings stage O in the item's own Q buffer and hand that
    buffer back to the producer during the next item, once the store has read it: checked on
    one program an item and on persistent grids (static and dynamic) whose programs walk many
    items (17 row blocks of 2 x 16 heads: 544 items, about four a program), in bfloat16 (the
    per-key term on the tensor cores) and float16 (by FMA), out and lse against float64."""
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.kernels import hopper
    from flashgen.kernels.alibi import check_slopes

    b, h, n, d = 2, 16, 64 * 33 + 5, 128
    q, k, v = (t.detach() for t in _inputs(b, h, h, n, n, d, seed=7, dtype=dtype, device="cuda"))
    slopes = check_slopes(_slopes(b, h, True, "cuda"), q)
    persistent, dynamic = {"plain": (False, False), "static": (True, False),
                           "dynamic": (True, True)}[grid]  # fmt: skip
    cfg = HopperConfig(128, 128, 2, 2, 4, 168, False, persistent, dynamic)
    name = str(dtype).removeprefix("torch.")
    spec = KernelSpec(d, causal, name, "fwd", alibi=True)
    assert hopper.alibi_mma(spec) is (dtype == torch.bfloat16)
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, dtype=torch.float32, device="cuda")
    hopper.forward(q, k, v, out, lse, scale=d**-0.5, spec=spec, config=cfg, alibi=slopes)
    s = scores_ref(q, k) + bias_ref(slopes, n, n)
    s = s.masked_fill(hidden_ref(n, n, causal=causal).to(s.device), float("-inf"))
    want, want_lse = rows_ref(s, v)
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert (out.double() - want).abs().max().item() <= tol * want.abs().max().item()
    assert (lse.double() - want_lse).abs().max().item() <= 1e-3 * want_lse.abs().max().item()
