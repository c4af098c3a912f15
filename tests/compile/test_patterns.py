"""Each attention spelling the backend claims to recognise: compiled == eager (values and grads),
the site is really replaced by the flashgen op, and `flashgen.explain` reports it.

Graphs are compiled with fallback="aot_eager": AOTAutograd still traces the inserted op (fake
impl, autograd) but Inductor's slow C++ codegen is left to tests/compile/test_backend.py. The kernels run
in Triton's interpreter, so shapes are tiny (B=2, H<=4, T<=37, D=16).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from model_checks import inputs_match_eager

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend

B, H, HKV, T, D = 2, 4, 2, 37, 16
SCALE = 1.0 / math.sqrt(D)
# Like conftest's `device` fixture: the interpreter on CPU, the real kernels where CUDA exists.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _qkv(dtype=torch.float32, hkv=H, t=T, d=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, t, d, generator=g).to(DEVICE, dtype)
    k = torch.randn(B, hkv, t, d, generator=g).to(DEVICE, dtype)
    v = torch.randn(B, hkv, t, d, generator=g).to(DEVICE, dtype)
    return [x.requires_grad_() for x in (q, k, v)]


# --------------------------------------------------------------------------- spellings


def sdpa_plain(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_causal_scale(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)


def sdpa_gqa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def matmul_mul_torch_softmax(q, k, v):
    s = torch.matmul(q, k.transpose(-2, -1)) * SCALE
    return torch.matmul(torch.softmax(s, dim=-1), v)


def at_div_mT_F_softmax(q, k, v):
    s = (q @ k.mT) / math.sqrt(k.size(-1))
    return F.softmax(s, dim=-1) @ v


def at_transpose23_method_softmax(q, k, v):
    return ((q @ k.transpose(2, 3)) * 0.2).softmax(-1) @ v


def bmm_3d(q, k, v):
    b, h, t, d = q.shape
    s = torch.bmm(q.reshape(b * h, t, d), k.reshape(b * h, t, d).transpose(1, 2)) / math.sqrt(d)
    return torch.bmm(s.softmax(dim=-1), v.reshape(b * h, t, d)).view(b, h, t, d)


def einsum_both(q, k, v):
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * SCALE
    return torch.einsum("bhqk,bhkd->bhqd", s.softmax(-1), v)


def prescaled_q(q, k, v):
    return torch.softmax((q * SCALE) @ k.transpose(-1, -2), -1) @ v


def upcast_float_to(q, k, v):
    s = (q @ k.transpose(-2, -1)) * SCALE
    return F.softmax(s.float(), dim=-1).to(q.dtype) @ v


def upcast_to32_type_as(q, k, v):
    s = (q @ k.transpose(-2, -1)) * SCALE
    return torch.softmax(s.to(torch.float32), dim=-1).type_as(q) @ v


def upcast_qk(q, k, v):
    """HF GPT-J's and CodeGen's scores: float32 casts of q and k, the probabilities cast back
    to the values' dtype."""
    s = torch.matmul(q.to(torch.float32), k.to(torch.float32).transpose(2, 3)) * SCALE
    return F.softmax(s, dim=-1).to(v.dtype) @ v


def upcast_qk_scaled_first(q, k, v):
    """The same with q scaled before its cast and `.float()` / `type_as` spellings."""
    s = (q * SCALE).float() @ k.float().mT
    return s.softmax(-1).type_as(v) @ v


def dropout_p0(q, k, v):
    p = F.softmax(q @ k.mT * SCALE, dim=-1)
    return F.dropout(p, p=0.0, training=True) @ v


def causal_triu_inline(q, k, v):
    t = q.size(-2)
    mask = torch.triu(torch.ones(t, t, device=q.device), diagonal=1).bool()
    s = (q @ k.transpose(-2, -1)) * SCALE
    s = s.masked_fill(mask, torch.finfo(s.dtype).min)
    return s.softmax(-1) @ v


def where_causal(q, k, v):
    t = q.size(-2)
    keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s = torch.where(keep, (q @ k.transpose(-2, -1)) * SCALE, float("-inf"))
    return s.softmax(-1) @ v


class AdditiveCausalBuffer(nn.Module):
    """HF-style additive causal mask: 0 on and below the diagonal, -inf above it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.full((64, 64), float("-inf")).triu(1))

    def forward(self, q, k, v):
        t = q.size(-2)
        s = (q @ k.transpose(-2, -1)) * SCALE + self.mask[:t, :t]
        return s.softmax(-1) @ v


def gqa_repeat_interleave(q, k, v):
    n = q.size(1) // k.size(1)
    k, v = k.repeat_interleave(n, dim=1), v.repeat_interleave(n, dim=1)
    return torch.softmax(q @ k.transpose(-2, -1) * SCALE, dim=-1) @ v


def gqa_expand_reshape(q, k, v):
    b, hkv, t, d = k.shape
    n = q.size(1) // hkv

    def rep(x):
        return x[:, :, None, :, :].expand(b, hkv, n, t, d).reshape(b, hkv * n, t, d)

    return F.scaled_dot_product_attention(q, rep(k), rep(v), is_causal=True)


class TrilBufferCausal(nn.Module):
    """nanoGPT's spelling: a registered tril buffer, sliced, masked_fill with -inf, dropout."""

    def __init__(self, max_t=64):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(max_t, max_t)).view(1, 1, max_t, max_t))
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        return att @ v


class WhereBufferTensorFill(nn.Module):
    """HF GPT-Neo's mask: a boolean tril buffer sliced to the lengths (its local layers: the
    band left after `xor` with the tril `window` diagonals down), applied by `torch.where` with
    a 0-d tensor of finfo.min as the fill."""

    def __init__(self, window=None, max_t=64):
        super().__init__()
        bias = torch.tril(torch.ones(max_t, max_t, dtype=torch.bool)).view(1, 1, max_t, max_t)
        if window is not None:
            bias = torch.bitwise_xor(bias, torch.tril(bias, -window))
        self.register_buffer("bias", bias)

    def forward(self, q, k, v):
        tq, tk = q.size(-2), k.size(-2)
        s = torch.matmul(q, k.transpose(-1, -2)) * SCALE
        fill = torch.tensor(torch.finfo(s.dtype).min, dtype=s.dtype, device=s.device)
        s = torch.where(self.bias[:, :, tk - tq : tk, :tk], s, fill)
        return s.softmax(-1) @ v


def masked_fill_tensor_fill(q, k, v):
    t = q.size(-2)
    hide = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    s = (q @ k.transpose(-2, -1)) * SCALE
    return s.masked_fill(hide, torch.tensor(float("-inf"))).softmax(-1) @ v


class SdpaDropoutEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.p = 0.1

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.p if self.training else 0.0, is_causal=True
        )


REPLACED = [
    ("sdpa_plain", sdpa_plain, {}),
    ("sdpa_causal_scale", sdpa_causal_scale, {}),
    ("sdpa_gqa", sdpa_gqa, {"hkv": HKV}),
    ("sdpa_dropout_eval", lambda: SdpaDropoutEval().eval(), {}),
    ("matmul_mul_torch_softmax", matmul_mul_torch_softmax, {}),
    ("at_div_mT_F_softmax", at_div_mT_F_softmax, {}),
    ("at_transpose23_method_softmax", at_transpose23_method_softmax, {}),
    ("bmm_3d", bmm_3d, {}),
    ("einsum_both", einsum_both, {}),
    ("prescaled_q", prescaled_q, {}),
    ("upcast_float_to_fp16", upcast_float_to, {"dtype": torch.float16}),
    ("upcast_to32_type_as_fp16", upcast_to32_type_as, {"dtype": torch.float16}),
    ("upcast_qk_fp16", upcast_qk, {"dtype": torch.float16}),
    ("upcast_qk_scaled_first_fp16", upcast_qk_scaled_first, {"dtype": torch.float16}),
    ("dropout_p0", dropout_p0, {}),
    ("causal_tril_buffer", lambda: TrilBufferCausal().eval(), {}),
    ("causal_triu_inline", causal_triu_inline, {}),
    ("where_causal", where_causal, {}),
    ("where_buffer_tensor_fill", lambda: WhereBufferTensorFill(), {}),
    ("where_band_buffer_tensor_fill", lambda: WhereBufferTensorFill(window=5), {}),
    ("masked_fill_tensor_fill", masked_fill_tensor_fill, {}),
    ("additive_causal_buffer", lambda: AdditiveCausalBuffer(), {}),
    ("gqa_repeat_interleave", gqa_repeat_interleave, {"hkv": HKV}),
    ("gqa_expand_reshape", gqa_expand_reshape, {"hkv": HKV}),
]


def _model(entry):
    fn = entry[1]
    return fn().to(DEVICE) if fn.__name__ == "<lambda>" else fn


def _tol(dtype):
    return {"atol": 2e-3, "rtol": 2e-3} if dtype == torch.float16 else {"atol": 1e-4, "rtol": 1e-4}


def _check_compiled_matches_eager(model, kw, compile_kw=None):
    dtype = kw.get("dtype", torch.float32)
    qkv = _qkv(**kw)
    ref_in = [x.detach().clone().requires_grad_() for x in qkv]
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"), **(compile_kw or {}))
    out = compiled(*qkv)
    # float64 eager reference
    ref = model(*[x.double() for x in ref_in])
    grad = torch.randn_like(out)
    out.backward(grad)
    ref.backward(grad.double())
    tol = _tol(dtype)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    for got, want in zip(qkv, ref_in, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad.double(), **tol)


@pytest.mark.parametrize("entry", REPLACED, ids=[e[0] for e in REPLACED])
def test_spelling_is_replaced_and_matches_eager(entry):
    name, _fn, kw = entry
    model = _model(entry)
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    _check_compiled_matches_eager(model, kw)
    after = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    assert after - before == 1, f"{name}: the site was not replaced by flashgen::attention"

    report = flashgen.explain(model, *_qkv(**kw))
    assert (report.found, report.replaced, len(report.skipped)) == (1, 1, 0), str(report)


def test_explain_reports_the_tensor_fills_causal_structure():
    """The 0-d tensor fill is read as its number, so the buffer's structure is proven: causal,
    and the band a causal window of 5 keys."""
    (site,) = flashgen.explain(WhereBufferTensorFill().to(DEVICE), *_qkv()).sites
    assert site.replaced and site.causal is True and site.window is None and not site.mask
    (site,) = flashgen.explain(WhereBufferTensorFill(window=5).to(DEVICE), *_qkv()).sites
    assert site.replaced and site.causal is True and site.window == 5 and not site.mask


def test_casts_of_q_and_k_from_two_dtypes_are_not_looked_through():
    """q and k cast up from bfloat16, v in float16: no one dtype for the kernels, so the site
    stays as written (the casts are looked through only from the values' dtype)."""
    q, k, v = _qkv()
    q, k, v = q.detach().bfloat16(), k.detach().bfloat16(), v.detach().half()
    report = flashgen.explain(upcast_qk, q, k, v)
    assert (report.found, report.replaced) == (1, 0), str(report)
    assert "share one dtype; got float32/float32/float16" in report.skipped[0].reason


def test_explain_reports_gqa_causal_and_scale():
    report = flashgen.explain(gqa_repeat_interleave, *_qkv(hkv=HKV))
    (site,) = report.sites
    assert site.replaced and site.causal is False and site.gqa_group == H // HKV
    assert site.scale == pytest.approx(SCALE)
    report = flashgen.explain(TrilBufferCausal().to(DEVICE).eval(), *_qkv())
    (site,) = report.sites
    assert site.causal is True and site.scale == pytest.approx(1 / math.sqrt(D))
    text = str(report)
    assert "test_patterns.py" in text and "replace" in text


# --------------------------------------------------------------------------- skipped sites


def additive_mask_input(q, k, v, mask):
    s = q @ k.transpose(-2, -1) * SCALE + mask
    return s.softmax(-1) @ v


def bias_before_scale(q, k, v, mask):
    s = (q @ k.transpose(-2, -1) + mask) * SCALE  # the bias is scaled too: not the kernels'
    return s.softmax(-1) @ v


def returns_weights(q, k, v, mask):
    p = torch.softmax(q @ k.transpose(-2, -1) * SCALE, dim=-1)
    return p @ v, p


def dropout_all(q, k, v, mask):
    p = torch.softmax(q @ k.transpose(-2, -1) * SCALE, dim=-1)
    return F.dropout(p, p=1.0, training=True) @ v


class NotCausalBuffer(nn.Module):
    """A triangular buffer shifted by one, its diagonal cleared: looks like a causal mask, is
    not one, nor a band (each query sees the keys before it and the one after)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(64, 64), diagonal=1) - torch.eye(64))

    def forward(self, q, k, v, mask):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * SCALE
        att = att.masked_fill(self.bias[:t, :t] == 0, float("-inf"))
        return att.softmax(-1) @ v


class MaskFromInput(nn.Module):
    def forward(self, q, k, v, mask):
        att = (q @ k.transpose(-2, -1)) * SCALE
        return att.masked_fill(mask < 0, float("-inf")).softmax(-1) @ v


SKIPPED = [
    ("bias_before_scale", bias_before_scale, "additive attn_mask is not supported"),
    ("returns_weights", returns_weights, "also used outside the attention"),
    ("dropout_all", dropout_all, "dropout p=1.0 (a constant in [0, 1) is supported)"),
    ("not_causal_buffer", NotCausalBuffer(), "not causal"),
    ("mask_from_input", MaskFromInput(), "mask is read from the forward() input"),
]


@pytest.mark.parametrize("entry", SKIPPED, ids=[e[0] for e in SKIPPED])
def test_unsupported_site_is_skipped_with_reason(entry):
    name, model, reason = entry
    q, k, v = _qkv()
    mask = torch.randn(T, T, device=DEVICE)
    if isinstance(model, nn.Module):
        model.to(DEVICE)
    report = flashgen.explain(model, q, k, v, mask)
    assert (report.found, report.replaced) == (1, 0), str(report)
    assert reason in report.skipped[0].reason, str(report)
    assert reason in str(report)
    if name == "dropout_all":
        return  # random: training-mode dropout is tested in tests/compile/test_patterns_dropout.py
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    got, want = compiled(q, k, v, mask), model(q, k, v, mask)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_hand_written_additive_bias_is_replaced_and_matches_eager():
    """`q @ k^T * scale + bias` from a forward() input: the kernels read the bias as an
    additive attn_mask (exact at every shape); output and gradients, the bias's too, equal
    eager's in float64."""
    _bias_site_matches_float64(additive_mask_input, torch.randn(T, T, device=DEVICE))


def _bias_site_matches_float64(fn, bias):
    """`fn(q, k, v, bias)` has one site, replaced with `bias` as an additive mask tensor; the
    compiled output and gradients, the bias's too, equal eager's in float64."""
    q, k, v = (t.requires_grad_() for t in _qkv())
    bias.requires_grad_()
    report = flashgen.explain(fn, q, k, v, bias)
    assert report.replaced == 1 and report.sites[0].mask == "add", str(report)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend(fallback="aot_eager"))
    got = compiled(q, k, v, bias)
    leaves = (q, k, v, bias)
    got_grads = torch.autograd.grad(got.square().sum(), leaves)
    ref_in = [t.detach().double().requires_grad_() for t in leaves]
    want = fn(*ref_in)
    want_grads = torch.autograd.grad(want.square().sum(), ref_in)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)
    return q, k, v, bias


def two_biases(q, k, v, bias, padding):
    s = q @ k.transpose(-2, -1) * SCALE + bias  # T5's relative bias, then its padding mask
    s = s + padding
    return s.softmax(-1) @ v


def test_two_added_biases_are_read_as_their_sum():
    """Two floating tensors added after the scale, both forward() inputs (T5's relative bias
    [1, H, T, T] that requires grad and its additive padding mask [B, 1, 1, T], as a
    checkpointed T5 layer gets them): the kernels read their sum as one additive mask; output
    and gradients, the bias's too, equal eager's in float64. A second bias added before the
    scale is still refused."""
    q, k, v = (t.requires_grad_() for t in _qkv())
    bias = torch.randn(1, H, T, T, device=DEVICE, requires_grad=True)
    padding = torch.zeros(B, 1, 1, T, device=DEVICE)
    padding[1, ..., :5] = torch.finfo(torch.float32).min  # left padding
    report = flashgen.explain(two_biases, q, k, v, bias, padding)
    assert report.replaced == 1 and report.sites[0].mask == "add", str(report)
    assert not report.sites[0].key_mask, str(report)  # (the [B, H, T, T] sum is read whole)
    torch._dynamo.reset()
    got = torch.compile(two_biases, backend=backend(fallback="aot_eager"))(q, k, v, bias, padding)
    leaves = (q, k, v, bias)
    got_grads = torch.autograd.grad(got.square().sum(), leaves)
    ref = [t.detach().double().requires_grad_() for t in leaves]
    want = two_biases(*ref, padding.double())
    want_grads = torch.autograd.grad(want.square().sum(), ref)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)

    def scaled_second(q, k, v, bias, padding):
        return ((q @ k.transpose(-2, -1) + padding) * SCALE + bias).softmax(-1) @ v

    report = flashgen.explain(scaled_second, q, k, v, bias, padding)
    assert (report.found, report.replaced) == (1, 0), str(report)


def subtracted_bias_input(q, k, v, mask):
    s = q @ k.transpose(-2, -1) * SCALE - mask  # a penalty: the kernels must add -mask
    return s.softmax(-1) @ v


def bias_minus_scores(q, k, v, mask):
    s = mask - q @ k.transpose(-2, -1) * SCALE  # negated scores: no kernel computes this
    return s.softmax(-1) @ v


def test_subtracted_bias_is_negated_and_matches_eager():
    """`q @ k^T * scale - bias` is handed to the kernels as the additive mask -bias (it was
    handed over as +bias): output and gradients, the bias's too, equal eager's in float64;
    `bias - scores` (the scores negated) is left to Inductor."""
    bias = 3 * torch.randn(T, T, device=DEVICE)
    q, k, v, bias = _bias_site_matches_float64(subtracted_bias_input, bias)
    report = flashgen.explain(bias_minus_scores, q, k, v, bias)
    assert (report.found, report.replaced) == (1, 0), str(report)
    assert "subtracted from" in report.skipped[0].reason, str(report)
    torch._dynamo.reset()
    compiled = torch.compile(bias_minus_scores, backend=backend(fallback="aot_eager"))
    torch.testing.assert_close(compiled(q, k, v, bias), bias_minus_scores(q, k, v, bias))


def test_multihead_attention_with_unused_weights():
    """nn.MultiheadAttention called the default way (need_weights=True) whose weights are
    dropped is replaced with no mask or a causal one (PyTorch's explicit softmax path computes
    the same attention), and matches eager; used weights, a key_padding_mask or a mask not
    proven causal beside need_weights=True are left alone (that path gives a row that sees no
    key NaN, the kernels zeros), and a learned attn_mask too."""
    mha = nn.MultiheadAttention(H * D, H, batch_first=True).to(DEVICE)
    x = torch.randn(B, T, H * D, device=DEVICE)

    def default_call(x):
        return mha(x, x, x)[0]

    def causal_call(x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.size(1), device=x.device)
        out, _ = mha(x, x, x, attn_mask=mask)
        return out

    for fn, causal in ((default_call, False), (causal_call, True)):
        report = flashgen.explain(fn, x)
        assert (report.found, report.replaced) == (1, 1), str(report)
        assert report.sites[0].causal is causal, str(report)
        torch._dynamo.reset()
        xg, xw = x.clone().requires_grad_(), x.clone().requires_grad_()
        got = torch.compile(fn, backend=backend(fallback="aot_eager"))(xg)
        want = fn(xw)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        r = torch.randn(want.shape, device=DEVICE)
        (gx,) = torch.autograd.grad((got * r).sum(), xg)
        (wx,) = torch.autograd.grad((want * r).sum(), xw)
        torch.testing.assert_close(gx, wx, atol=5e-5, rtol=1e-4)

    def weights_used(x):
        out, w = mha(x, x, x)
        return out.sum() + w.sum()

    report = flashgen.explain(weights_used, x)
    assert report.replaced == 0 and "weights" in report.skipped[0].reason, str(report)
    pad = torch.zeros(B, T, dtype=torch.bool, device=DEVICE)
    report = flashgen.explain(lambda x: mha(x, x, x, key_padding_mask=pad)[0], x)
    assert report.replaced == 0 and "need_weights=False" in report.skipped[0].reason, str(report)
    bias = torch.randn(T, T, device=DEVICE)
    bias.requires_grad_()  # a learned MHA attn_mask: not read as a tensor (no gradient path)
    report = flashgen.explain(lambda x: mha(x, x, x, need_weights=False, attn_mask=bias)[0], x)
    assert report.replaced == 0 and "without grad" in report.skipped[0].reason, str(report)


def test_mask_with_unequal_query_and_key_lengths_is_skipped():
    bias = torch.tril(torch.ones(64, 64, device=DEVICE))

    def cross(q, k, v):
        tq, tk = q.size(-2), k.size(-2)
        s = (q @ k.transpose(-2, -1)) * SCALE
        return s.masked_fill(bias[:tq, :tk] == 0, float("-inf")).softmax(-1) @ v

    q = torch.randn(B, H, 9, D, device=DEVICE)
    k, v = (torch.randn(B, H, 13, D, device=DEVICE) for _ in range(2))
    report = flashgen.explain(cross, q, k, v)
    assert report.replaced == 0 and "lengths that may differ" in report.skipped[0].reason


def sdpa_bool_causal_mask(q, k, v):
    t = q.size(-2)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_sdpa_causal_mask_is_replaced_only_for_equal_lengths():
    """A boolean causal attn_mask becomes is_causal. With query and key lengths that may differ
    it is left alone: a mask slice causal at the traced lengths (here tril(ones(13, 13))[:9])
    need not be at the next call's (a KV-cache style slice)."""
    model = sdpa_bool_causal_mask
    before = sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))
    _check_compiled_matches_eager(model, {})
    assert sum(v for k, v in patterns.counters.items() if k.endswith(".replaced")) == before + 1

    def sliced(q, k, v):
        tq, tk = q.size(-2), k.size(-2)
        mask = torch.ones(tk, tk, dtype=torch.bool, device=q.device).tril()[:tq]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    q = torch.randn(B, H, 9, D, device=DEVICE)
    k, v = (torch.randn(B, H, 13, D, device=DEVICE) for _ in range(2))
    report = flashgen.explain(sliced, q, k, v)
    # not proven causal: the kernel reads the mask tensor itself (issue 16), as a plain mask
    (site,) = report.sites
    assert site.replaced and site.mask == "bool" and site.causal is False, str(report)


def test_unsupported_head_dim_is_skipped_with_kernel_reason():
    q, k, v = _qkv(d=8)
    report = flashgen.explain(sdpa_plain, q, k, v)
    assert report.replaced == 0 and "head_dim must be between" in report.skipped[0].reason


def test_non_attention_softmax_is_not_reported():
    def classifier(x, w):
        return torch.softmax(x @ w, dim=-1).sum(-1)

    report = flashgen.explain(classifier, torch.randn(3, 8), torch.randn(8, 5))
    assert report.found == 0


def _fill_min_from_input(q, k, v, hidden):
    att = (q @ k.transpose(-2, -1)) * SCALE
    return att.masked_fill(hidden, torch.finfo(q.dtype).min).softmax(-1) @ v


def _where_keep_min_from_input(q, k, v, hidden):
    att = (q @ k.transpose(-2, -1)) * SCALE
    return torch.where(~hidden, att, torch.finfo(torch.float32).min).softmax(-1) @ v


@pytest.mark.parametrize("fn", [_fill_min_from_input, _where_keep_min_from_input])
def test_hf_style_boolean_mask_from_input_is_read_as_tensor(fn):
    """A boolean mask from a forward() input filled with finfo.min (HF's padded batch): the
    kernels read it as attn_mask; rows it hides entirely get eager's uniform softmax (the mean
    of v, with v's gradient). Output and q/k/v gradients equal eager's."""
    hidden = torch.rand(B, 1, T, T, generator=torch.Generator().manual_seed(3)) < 0.5
    hidden[0, 0, :5] = True  # fully masked rows
    hidden = hidden.to(DEVICE)
    q, k, v = _qkv()
    report = flashgen.explain(fn, q, k, v, hidden)
    assert report.replaced == 1 and report.sites[0].mask == "bool", str(report)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend(fallback="eager"))
    inputs_match_eager(fn, compiled, q, k, v, hidden, grad_tol=(1e-4, 1e-3))


def test_hf_style_mask_from_input_with_inf_fill_stays_skipped():
    """With -inf a fully hidden row is NaN in eager: the mask is not read as a tensor."""
    hidden = torch.zeros(B, 1, T, T, dtype=torch.bool, device=DEVICE)
    report = flashgen.explain(MaskFromInput(), *_qkv(), hidden.float() - 1)
    reason = report.skipped[0].reason
    assert "forward() input" in reason and "attn_mask tensor it is refused" in reason, reason


def _gqa_fill_min_from_input(q, k, v, hidden):
    """GQA spelled as a copy of K/V (HF's repeat_kv) with the padded-batch mask."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))
    att = (q @ k.transpose(-2, -1)) * SCALE
    return att.masked_fill(hidden, torch.finfo(q.dtype).min).softmax(-1) @ v


def test_gqa_mask_from_input_with_fully_hidden_rows_matches_eager():
    """The fold of repeated K/V into GQA and the mean of v for fully hidden rows together: the
    mean is taken over the repeated v (one per query head), so shapes and values match eager."""
    hidden = torch.rand(B, 1, T, T, generator=torch.Generator().manual_seed(5)) < 0.4
    hidden[1, 0, 3:9] = True  # fully masked rows
    hidden = hidden.to(DEVICE)
    q, k, v = _qkv(hkv=HKV)
    report = flashgen.explain(_gqa_fill_min_from_input, q, k, v, hidden)
    site = report.sites[0]
    assert report.replaced == 1 and site.mask == "bool" and site.gqa_group == H // HKV, site
    torch._dynamo.reset()
    compiled = torch.compile(_gqa_fill_min_from_input, backend=backend(fallback="eager"))
    inputs_match_eager(_gqa_fill_min_from_input, compiled, q, k, v, hidden, grad_tol=(1e-4, 1e-3))


class InPlaceFill(nn.Module):
    """`att.masked_fill_(mask, -inf)`: the in-place spelling of a causal mask on the scores
    (`after`: the fill comes after the softmax has read the scores, so it is no mask at all)."""

    def __init__(self, after=False):
        super().__init__()
        self.after = after
        self.register_buffer("bias", torch.tril(torch.ones(64, 64, dtype=torch.bool)))

    def forward(self, q, k, v):
        t = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * SCALE
        if self.after:
            p = att.softmax(-1)
            att.masked_fill_(~self.bias[:t, :t], float("-inf"))
            return p @ v, att
        att.masked_fill_(~self.bias[:t, :t], float("-inf"))
        return att.softmax(-1) @ v


def test_in_place_masked_fill_is_the_scores_mask():
    """The fill before the softmax is taken as the mask (causal, replaced); one after it is not
    (the scores are used elsewhere: left to Inductor). Both compiled graphs match eager."""
    q, k, v = _qkv()
    for after, replaced in ((False, 1), (True, 0)):
        model = InPlaceFill(after).to(DEVICE)
        report = flashgen.explain(model, q, k, v)
        assert (report.found, report.replaced) == (1, replaced), str(report)
        if replaced:
            assert report.sites[0].causal is True, str(report)
        torch._dynamo.reset()
        got = torch.compile(model, backend=backend(fallback="aot_eager"))(q, k, v)
        want = model(q, k, v)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def padded_causal_by_hand(q, k, v, pad):
    """A padded decoder batch written by hand: causal `&` the padding per key, hidden keys
    filled with finfo.min (HF's eager spelling), so left padding hides whole query rows."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    keep = causal & pad[:, None, None, :]
    s = (q @ k.transpose(-2, -1)) * SCALE
    return s.masked_fill(~keep, torch.finfo(s.dtype).min).softmax(-1) @ v


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_hand_written_causal_and_key_mask_is_split(dynamic):
    """The kernels get the causal flag and the padding as a key mask (not the N x N tensor);
    every row, the ones left padding hides whole included (eager's uniform softmax: the mean
    of v), and the gradients match float64 eager."""
    q, k, v = (t.requires_grad_() for t in _qkv())
    pad = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    pad[-1, :3] = False  # left padding: the last entry's first 3 query rows see no key
    report = flashgen.explain(padded_causal_by_hand, q, k, v, pad)
    assert report.replaced == 1, str(report)
    site = report.sites[0]
    assert (site.causal, site.mask) == (True, "bool"), str(report)
    torch._dynamo.reset()
    compiled = torch.compile(padded_causal_by_hand, backend=backend(fallback="aot_eager"),
                             dynamic=dynamic)  # fmt: skip
    got = compiled(q, k, v, pad)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = padded_causal_by_hand(qd, kd, vd, pad)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)
    g = torch.randn(got.shape, dtype=torch.float64, device=DEVICE)
    got.backward(g.float())
    want.backward(g)
    for a, b in ((q, qd), (k, kd), (v, vd)):
        torch.testing.assert_close(a.grad.double(), b.grad, atol=1e-4, rtol=1e-3)


# --------------------------------------------------------------------------- under autocast


def sdpa_rotary_like(q, k, v):
    """q and k float32 (as rotary embeddings with float32 tables leave them), v float16."""
    return F.scaled_dot_product_attention(q, k, v.half(), is_causal=True)


def matmul_softmax_float32(q, k, v):
    s = q @ k.transpose(-2, -1) * SCALE
    return F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) @ v


@pytest.mark.parametrize("fn", [sdpa_rotary_like, matmul_softmax_float32])
def test_sites_under_autocast_take_the_operands_autocast_casts(fn):
    """Under `torch.autocast` to float16 each product casts its float32 operands first (SDPA's
    output, Q K^T and P V are float16): the site is replaced with q, k and v cast so, and the
    output and the float32 inputs' gradients match float64 within float16's rounding."""
    q, k, v = _qkv()
    with torch.autocast(DEVICE, dtype=torch.float16):
        report = flashgen.explain(fn, q, k, v)
        assert report.replaced == 1, str(report)
        assert "float16 (cast by autocast)" in report.sites[0].shape, str(report)
        torch._dynamo.reset()
        got = torch.compile(fn, backend=backend(fallback="aot_eager"))(q, k, v)
    assert got.dtype == torch.float16
    grads = torch.autograd.grad(got.float().square().sum(), (q, k, v))
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    s = torch.softmax(ref_in[0] @ ref_in[1].mT * SCALE + _causal_bias(fn), -1)
    want = s @ ref_in[2]
    want_grads = torch.autograd.grad(want.square().sum(), ref_in)
    torch.testing.assert_close(got.double(), want, atol=5e-3, rtol=5e-3)
    for g, w in zip(grads, want_grads, strict=True):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g.double(), w, atol=2e-2, rtol=2e-2)


def _causal_bias(fn):
    if fn is not sdpa_rotary_like:
        return 0.0
    return torch.full((T, T), float("-inf"), dtype=torch.float64, device=DEVICE).triu(1)


def test_an_additive_mask_autocast_would_cast_stays_with_pytorch():
    """SDPA's float32 attn_mask under autocast to float16 is cast too (finfo(float32).min is
    -inf there): the site is kept, saying why."""

    def fn(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    q, k, v = _qkv()
    bias = torch.randn(T, T, device=DEVICE)
    with torch.autocast(DEVICE, dtype=torch.float16):
        report = flashgen.explain(fn, q, k, v, bias)
    assert (report.found, report.replaced) == (1, 0), str(report)
    assert "under autocast SDPA casts its float32 attn_mask" in report.skipped[0].reason
