"""Bottom-right causal alignment (issue 17): `causal_align="bottom_right"`, forward and backward.

Against float64 with query i seeing keys j <= i + Sk - Sq: Sq < Sk (the window kernels' band),
Sq == Sk (plain causal), Sq > Sk (leading rows see nothing: zeros and no gradient), query
lengths on both sides of the decode path's 16, GQA, odd lengths, causal windows counted from
that diagonal; the op under
torch.compile(dynamic=True), opcheck, and the argument errors. `causal=True` alone stays
SDPA's top-left alignment.
"""

from __future__ import annotations

import math

import pytest
import torch

from flashgen.ops import attention


def ref(q, k, v, *, bottom_right=True, window=None):
    """float64 attention, query i seeing keys j <= i + off (off = Sk - Sq bottom-right, else
    0) and, with a window w, j > i + off - w; rows that see no key give zeros."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    off = k.shape[2] - q.shape[2] if bottom_right else 0
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    hidden = j > i + off
    if window is not None:
        hidden = hidden | (j <= i + off - window)
    return torch.softmax(s.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0) @ v


def _inputs(b, hq, hkv, sq, sk, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(b, h, s, d, generator=gen).requires_grad_()
        for h, s in ((hq, sq), (hkv, sk), (hkv, sk))
    ]


def _grads_match(out, want, q, k, v, tol=5e-5, window=None):
    gen = torch.Generator().manual_seed(9)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.float())
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref(qd, kd, vd, window=window).backward(g)
    for got, exp in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        assert not got.isnan().any()
        torch.testing.assert_close(got.double(), exp, atol=tol, rtol=1e-4)


@pytest.mark.parametrize(
    "hq,hkv,sq,sk,d",
    [
        (2, 1, 5, 37, 32),  # decode path forward
        (4, 2, 20, 37, 40),  # band of the window kernels
        (2, 2, 37, 37, 16),  # equal lengths: plain causal
        (2, 1, 40, 23, 32),  # 17 rows see no key
        (1, 1, 127, 101, 16),
    ],
    ids=lambda x: str(x),
)
def test_bottom_right_forward_backward(hq, hkv, sq, sk, d):
    q, k, v = _inputs(1, hq, hkv, sq, sk, d, seed=sq)
    out = attention(q, k, v, causal=True, causal_align="bottom_right")
    want = ref(q, k, v)
    torch.testing.assert_close(out.detach().double(), want, atol=2e-5, rtol=1e-4)
    _grads_match(out, want, q, k, v)


@pytest.mark.parametrize(
    "sq,sk,w",
    [
        (20, 37, 30),  # Sk - Sq < w: one band over every key
        (20, 37, 6),  # Sk - Sq >= w: the band over the keys from Sk - Sq - w + 1
        (1, 37, 5),  # one query row (a decode step): its last 5 keys
        (9, 64, 1),  # each query its own position only
        (37, 37, 7),  # equal lengths: the top-left causal window
        (40, 23, 6),  # 17 rows see no key, the rest a top-left window
    ],
    ids=lambda x: str(x),
)
def test_bottom_right_window_forward_backward(sq, sk, w):
    """A causal window counted from the bottom-right diagonal (a KV cache under Mistral's
    sliding window), GQA: forward and gradients against float64, zeros for the keys no query
    sees."""
    q, k, v = _inputs(1, 4, 2, sq, sk, 16, seed=sq + w)
    out = attention(q, k, v, causal=True, causal_align="bottom_right", window=w)
    want = ref(q, k, v, window=w)
    torch.testing.assert_close(out.detach().double(), want, atol=2e-5, rtol=1e-4)
    _grads_match(out, want, q, k, v, window=w)
    if sk - sq >= w:
        assert not k.grad[:, :, : sk - sq - w + 1].any()


def test_bottom_right_window_under_compile_dynamic():
    def f(q, k, v):
        return attention(q, k, v, causal=True, causal_align="bottom_right", window=5)

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for sq, sk in ((3, 41), (9, 12), (12, 9)):
        q, k, v = _inputs(1, 2, 1, sq, sk, 16, seed=sk)
        out = compiled(q, k, v)
        torch.testing.assert_close(
            out.detach().double(), ref(q, k, v, window=5), atol=2e-5, rtol=1e-4
        )


def test_causal_true_stays_top_left():
    q, k, v = _inputs(1, 2, 1, 9, 30, 16)
    out = attention(q, k, v, causal=True)
    torch.testing.assert_close(
        out.detach().double(), ref(q, k, v, bottom_right=False), atol=2e-5, rtol=1e-4
    )


def test_bottom_right_under_compile_dynamic_and_opcheck():
    def f(q, k, v):
        return attention(q, k, v, causal=True, causal_align="bottom_right") * 2

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    for sq, sk in ((19, 41), (23, 60)):
        q, k, v = _inputs(1, 2, 1, sq, sk, 16, seed=sk)
        out = compiled(q, k, v)
        torch.testing.assert_close(out.detach().double(), 2 * ref(q, k, v), atol=2e-5, rtol=1e-4)
    q, k, v = (t.detach() for t in _inputs(1, 2, 1, 19, 30, 16))
    torch.library.opcheck(
        torch.ops.flashgen.attention_fwd.default,
        (q, k, v, True, 0.25, None, None, "bottom_right"),
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"causal": False, "causal_align": "bottom_right"}, "needs causal=True"),
        ({"causal": True, "causal_align": "bottom-right"}, "causal_align must be one of"),
        (
            {"causal": True, "causal_align": "bottom_right", "impl": "sdpa_efficient"},
            "bottom-right",
        ),
    ],
)
def test_bad_alignment_arguments(kwargs, match):
    q, k, v = (t.detach() for t in _inputs(1, 2, 1, 20, 30, 16))
    with pytest.raises(ValueError, match=match):
        attention(q, k, v, **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 256], ids=["no_window", "window_256"])
@pytest.mark.parametrize("sq,sk", [(1, 4099), (9, 2048), (300, 1000), (1000, 300)])
def test_bottom_right_bf16_on_gpu(sq, sk, window):
    q, k, v = (
        t.detach().cuda().to(torch.bfloat16).requires_grad_()
        for t in _inputs(2, 8, 2, sq, sk, 128, seed=sk)
    )
    out = attention(q, k, v, causal=True, causal_align="bottom_right", window=window)
    want = ref(q, k, v, window=window)
    torch.testing.assert_close(out.double(), want, atol=2e-2, rtol=2e-2)
    out.backward(torch.ones_like(out))
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref(qd, kd, vd, window=window).sum().backward()
    for got, exp in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        torch.testing.assert_close(got.double(), exp, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("sq,sk", [(20, 37), (40, 23), (5, 37)], ids=lambda x: str(x))
def test_bottom_right_keeps_softcap(sq, sk):
    """Softcap with the bottom-right alignment and Sq != Sk (the band, the rows that see no key,
    a short query): the cap is applied, forward and backward (it was silently dropped)."""
    from flashgen.kernels.reference import rows_ref, scores_ref

    cap = 0.7  # small against these scores, so a dropped cap is far outside the tolerance
    q, k, v = _inputs(1, 4, 2, sq, sk, 32, seed=sq + sk)
    out = attention(q, k, v, causal=True, causal_align="bottom_right", softcap=cap)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    s = scores_ref(qd, kd, softcap=cap).masked_fill(j > i + sk - sq, float("-inf"))
    want = rows_ref(s, vd)[0]
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    out.backward(g.float())
    want.backward(g)
    for got, exp in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4)


def test_a_decode_step_under_a_window_reads_its_last_keys(monkeypatch):
    """One query row with a bottom-right window of w keys: the decode kernels run on those w
    keys, without a mask (so a generation step costs the window, not the cache), and match
    float64; the backward of that forward matches too."""
    from flashgen.kernels import decode

    seen = []
    real = decode.decode_forward

    def spy(q, k, v, **kw):
        seen.append((k.shape[2], kw.get("causal_offset"), kw.get("mask")))
        return real(q, k, v, **kw)

    monkeypatch.setattr(decode, "decode_forward", spy)
    q, k, v = _inputs(2, 4, 2, 1, 50, 16, seed=5)
    out = attention(q, k, v, causal=True, causal_align="bottom_right", window=7)
    assert seen == [(7, None, None)]
    want = ref(q, k, v, window=7)
    torch.testing.assert_close(out.detach().double(), want, atol=2e-5, rtol=1e-4)
    _grads_match(out, want, q, k, v, window=7)
    assert not k.grad[:, :, :43].any() and k.grad[:, :, 43:].abs().sum() > 0


def _ref_extras(q, k, v, window, mask, slopes, keep=None, p=0.0):
    """float64 bottom-right causal attention (a window, an attn_mask: boolean kept or added,
    ALiBi slope * (j - i); dropout: the probabilities where `keep` holds, over 1 - p); rows
    that see no key give zeros."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    off = k.shape[2] - q.shape[2]
    i = torch.arange(q.shape[2], device=q.device)[:, None]
    j = torch.arange(k.shape[2], device=q.device)[None, :]
    if slopes is not None:
        s = s + slopes.double()[None, :, None, None] * (j - i)
    hidden = (j > i + off).expand(s.shape)
    if window is not None:
        hidden = hidden | (j <= i + off - window)
    if mask is not None and mask.dtype == torch.bool:
        hidden = hidden | ~mask
    elif mask is not None:
        s = s + mask.double()
    probs = torch.softmax(s.masked_fill(hidden, float("-inf")), -1).nan_to_num(0.0)
    if keep is not None:
        probs = probs * keep / (1 - p)
    return probs @ v


@pytest.mark.parametrize("extra", ["bool_mask", "add_mask", "key_mask", "alibi", "alibi_mask"])
@pytest.mark.parametrize(
    "sq,sk,w", [(20, 37, None), (20, 37, 6), (40, 23, None), (3, 30, None), (1, 30, 4)],
    ids=lambda x: str(x),
)  # fmt: skip
def test_bottom_right_with_a_mask_or_alibi(sq, sk, w, extra):
    """An attn_mask (boolean, additive, one per key) and ALiBi with the bottom-right alignment,
    a window or not, more queries than keys, short queries (the decode kernels read the mask
    with the offset): forward and gradients against float64."""
    from flashgen.kernels.alibi import standard_slopes

    q, k, v = _inputs(2, 4, 2, sq, sk, 16, seed=sq + sk)
    gen = torch.Generator().manual_seed(sk)
    mask = slopes = None
    if extra in ("bool_mask", "alibi_mask"):
        mask = torch.rand(2, 1, sq, sk, generator=gen) > 0.3
    elif extra == "add_mask":
        mask = torch.randn(1, 4, sq, sk, generator=gen)
    elif extra == "key_mask":
        mask = torch.rand(2, 1, 1, sk, generator=gen) > 0.3
    if extra.startswith("alibi"):
        slopes = standard_slopes(4)
    out = attention(
        q, k, v, causal=True, causal_align="bottom_right", window=w, attn_mask=mask,
        alibi_slopes=slopes,
    )  # fmt: skip
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = _ref_extras(qd, kd, vd, w, mask, slopes)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.float())
    want.backward(g)
    for got, exp in ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad)):
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4)


def test_bottom_right_refuses_lengths():
    q, k, v = (t.detach() for t in _inputs(1, 2, 1, 20, 30, 16))
    with pytest.raises(ValueError, match="key_lengths"):
        attention(q, k, v, causal=True, causal_align="bottom_right", key_lengths=[20])


def _drawn_seed(call):
    """(call()'s result, the dropout seed it drew): the op draws one seed from PyTorch's
    generator per call, so the same manual_seed before a fresh draw gives it back."""
    from flashgen.kernels import dropout

    torch.manual_seed(17)
    out = call()
    torch.manual_seed(17)
    return out, int(dropout.new_seed().item())


@pytest.mark.parametrize("extra", [None, "add_mask", "alibi", "bias"])
@pytest.mark.parametrize(
    "sq,sk,w",
    [(20, 37, None), (20, 37, 6), (40, 23, None), (3, 30, None), (1, 30, 4), (1, 30, None)],
    ids=lambda x: str(x),
)  # fmt: skip
def test_bottom_right_with_dropout(sq, sk, w, extra):
    """Attention dropout with the bottom-right alignment (a KV cache's keys in training: the
    band, a window whose first keys no row sees, more queries than keys, short queries that
    would take the decode kernels without dropout, one query row), alone and beside an
    additive mask, ALiBi or a learned bias: forward and gradients against float64 applying
    `aligned.keep_mask`, the mask the kernels draw on the rows and keys they run; and the
    draw is the same one in the forward and the backward (the gradients could not match
    otherwise)."""
    from flashgen.kernels import aligned
    from flashgen.kernels.alibi import standard_slopes

    p = 0.3
    q, k, v = _inputs(2, 4, 2, sq, sk, 16, seed=sq * 7 + sk)
    gen = torch.Generator().manual_seed(sk)
    mask = slopes = None
    if extra == "add_mask":
        mask = torch.randn(1, 4, sq, sk, generator=gen)
    elif extra == "bias":
        mask = torch.randn(2, 1, sq, sk, generator=gen).requires_grad_()
    elif extra == "alibi":
        slopes = standard_slopes(4)
    kw = dict(causal=True, causal_align="bottom_right", window=w, attn_mask=mask, dropout_p=p)
    out, seed = _drawn_seed(lambda: attention(q, k, v, alibi_slopes=slopes, **kw))
    keep = aligned.keep_mask(seed, p, 2, 4, sq, sk, "cpu", left=None if w is None else w - 1)
    i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    seen = (j <= i + sk - sq) & (w is None or j > i + sk - sq - (w or 0))
    rate = 1 - keep[seen.expand_as(keep)].float().mean().item()
    assert seen.sum() < 25 or abs(rate - p) < 0.1  # roughly p of the visible scores dropped
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    md = None if mask is None else mask.detach().double().requires_grad_(mask.requires_grad)
    want = _ref_extras(*leaves, w, md, slopes, keep, p)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.float())
    want.backward(g)
    pairs = [(t.grad, d.grad) for t, d in zip((q, k, v), leaves, strict=True)]
    if extra == "bias":
        pairs.append((mask.grad, md.grad))
    for got, exp in pairs:
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4)
    # dropout did drop: the undropped reference differs
    plain = _ref_extras(*(t.detach().double() for t in (q, k, v)), w, md, slopes)
    assert (plain - want).abs().max() > 1e-3


@pytest.mark.parametrize(
    "sq,sk,w,shape",
    [(20, 37, None, (1, 4, 20, 37)), (20, 37, 6, (4, 20, 37)), (40, 23, None, (2, 1, 40, 23)),
     (3, 30, 4, (1, 1, 3, 30))],
    ids=lambda x: str(x),
)  # fmt: skip
def test_bottom_right_learned_bias_gradient(sq, sk, w, shape):
    """A bias that requires grad with the bottom-right alignment (a window, more queries than
    keys, a short query; broadcast shapes): its gradient and q, k, v's against float64, zeros
    where no row sees a key."""
    q, k, v = _inputs(2, 4, 2, sq, sk, 16, seed=sq * sk)
    gen = torch.Generator().manual_seed(sq)
    bias = torch.randn(shape, generator=gen).requires_grad_()
    out = attention(q, k, v, causal=True, causal_align="bottom_right", window=w, attn_mask=bias)
    qd, kd, vd, bd = (t.detach().double().requires_grad_() for t in (q, k, v, bias))
    want = _ref_extras(qd, kd, vd, w, bd, None)
    torch.testing.assert_close(out.detach().double(), want.detach(), atol=2e-5, rtol=1e-4)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(g.float())
    want.backward(g)
    pairs = ((q.grad, qd.grad), (k.grad, kd.grad), (v.grad, vd.grad), (bias.grad, bd.grad))
    for got, exp in pairs:
        torch.testing.assert_close(got.double(), exp, atol=5e-5, rtol=1e-4)
    assert bias.grad.abs().sum() > 0


@pytest.mark.gpu
@pytest.mark.parametrize("window", [None, 256], ids=["no_window", "window_256"])
@pytest.mark.parametrize("sq,sk", [(9, 2048), (300, 1000), (1000, 300)])
def test_bottom_right_dropout_bf16_on_gpu(sq, sk, window):
    """bf16 on the GPU (whatever family the GPU's kernels choose): bottom-right causal with
    dropout 0.1 against float64 applying `aligned.keep_mask`, forward and gradients."""
    from flashgen.kernels import aligned

    q, k, v = (
        t.detach().cuda().to(torch.bfloat16).requires_grad_()
        for t in _inputs(2, 8, 2, sq, sk, 128, seed=sk)
    )
    out, seed = _drawn_seed(
        lambda: attention(
            q, k, v, causal=True, causal_align="bottom_right", window=window, dropout_p=0.1
        )
    )
    keep = aligned.keep_mask(
        seed, 0.1, 2, 8, sq, sk, "cuda", left=None if window is None else window - 1
    )
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = _ref_extras(*leaves, window, None, None, keep, 0.1)
    torch.testing.assert_close(out.double(), want.detach(), atol=2e-2, rtol=2e-2)
    out.backward(torch.ones_like(out))
    want.sum().backward()
    for got, exp in zip((q.grad, k.grad, v.grad), (t.grad for t in leaves), strict=True):
        torch.testing.assert_close(got.double(), exp, atol=5e-2, rtol=5e-2)
