"""Models with padding masks compiled with backend="flashgen" (issue 16).

An SDPA attn_mask that is not a causal mask (a padding mask built from the forward's
attention_mask input, an arbitrary boolean or additive mask) is handed to the kernel as a
tensor (`flashgen.attention(attn_mask=)`): exact by construction at every shape the graph
accepts. Tested on HF BERT and a left-padded HF Llama built from configs (no download) with
padded batches, and a hand-written SDPA model: the sites are replaced, forward and gradients
match eager, a mask that requires grad (a learned bias) with its gradient.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import flashgen

transformers = pytest.importorskip("transformers")


def _replaced(model, *args, **kwargs):
    report = flashgen.explain(model, *args, **kwargs)
    return [s for s in report.sites if s.replaced], [s for s in report.sites if not s.replaced]


def _compiled_matches_eager(model, inputs, loss, *, atol=2e-5):
    """Forward and parameter gradients of the compiled model equal eager's."""
    torch._dynamo.reset()
    model.zero_grad()
    want = model(**inputs)
    loss(want).backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    compiled = torch.compile(model, backend="flashgen")
    got = compiled(**inputs)
    loss(got).backward()
    return want, got, want_grads, {n: p.grad for n, p in model.named_parameters()}


def _padded_batch_matches_eager(model, ids, mask):
    """Both layers' attention replaced, and the compiled model's output and gradients at the
    unpadded positions (padded ones are not used downstream) equal eager's; the replaced sites."""
    inputs = {"input_ids": ids, "attention_mask": mask}
    replaced, skipped = _replaced(model, **inputs)
    assert len(replaced) == 2 and not skipped, skipped
    valid = mask.bool()[..., None]
    # random weights on the unpadded positions: the models end in a norm, whose rows' sum of
    # squares does not move, so a loss of it leaves the attention no gradient to compare
    width = model.config.hidden_size
    weights = torch.randn(*ids.shape, width, generator=torch.Generator().manual_seed(4)) * valid

    def loss(out):
        return (out.last_hidden_state * weights).sum()

    want, got, want_grads, grads = _compiled_matches_eager(model, inputs, loss)
    torch.testing.assert_close(got.last_hidden_state * valid, want.last_hidden_state * valid,
                               atol=2e-5, rtol=1e-4)  # fmt: skip
    attention = [
        n
        for n in want_grads
        if n.endswith(("q_proj.weight", "query.weight", ".q.weight", "Wqkv.weight"))
    ]
    assert attention and all(want_grads[n].abs().max() > 1e-3 for n in attention), attention
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-4, rtol=1e-3, msg=name)
    return replaced


def test_bert_padded_batch_replaced_and_matches_eager():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, attn_implementation="sdpa",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    model = transformers.BertModel(cfg)
    ids = torch.randint(1, 64, (3, 13), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 13, dtype=torch.long)
    mask[1, 9:] = 0  # right padding
    mask[2, 4:] = 0
    replaced = _padded_batch_matches_eager(model, ids, mask)
    # HF's bidirectional mask `(q_idx >= 0) & padding[b, kv_idx]` (materialised [B, 1, N, N])
    # reaches the kernels as the padding alone, one entry per key
    assert all(s.mask == "bool" and s.key_mask and s.causal is False for s in replaced)


def test_left_padded_llama_replaced_and_matches_eager():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.LlamaModel(cfg)
    ids = torch.randint(1, 64, (2, 11), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    replaced = _padded_batch_matches_eager(model, ids, mask)
    # HF's causal & padding mask, split: the causal flag and the padding as one entry per key
    assert all(s.causal is True and s.mask == "bool" and s.window is None for s in replaced)


def test_right_padded_mistral_window_split_into_band_and_key_mask():
    """HF Mistral with a sliding window over a right-padded batch: its mask (the causal band &
    the padding per key) reaches the kernels as window w and a key-padding mask; forward and
    gradients at the unpadded positions equal eager's."""
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        sliding_window=5, attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.MistralModel(cfg)
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 7:] = 0  # right padding
    replaced = _padded_batch_matches_eager(model, ids, mask)
    assert all(s.causal and s.window == 5 and s.mask == "bool" for s in replaced), replaced
    # flashgen.explain's column names both (it once showed the window alone)
    report = str(flashgen.explain(model, input_ids=ids, attention_mask=mask))
    assert report.count("window 5 + bool mask per key") == 2, report


@pytest.mark.parametrize(
    "family,side", [("llama", "left"), ("mistral", "right"), ("gemma2", "left")]
)
def test_eager_additive_padding_mask_split(family, side):
    """HF's eager attention adds `where(causal & keep, 0, finfo.min)` to the scores; finfo.min
    absorbs any score added to it, so that is `where(causal & keep, scores, finfo.min)`
    exactly, and it reaches the kernels as the causal flag (a window with Mistral's and
    Gemma-2's sliding layers) and a key-padding mask, not the N x N tensor. The forward equals
    eager's at every position, the left-padded rows that see no key (eager's uniform softmax)
    included; the gradients of a loss of the unpadded positions too. (A loss of a row that
    sees no key would differ: eager's uniform softmax there still passes a gradient to q and k
    through `scores + finfo.min`, the replacement's mean of v does not; such rows are padding,
    whose outputs reach no kept position: `flashgen.compile.patterns.mask_reading.additive_split`.)"""
    torch.manual_seed(0)
    kw = dict(
        vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager",
    )  # fmt: skip
    if family == "llama":
        model = transformers.LlamaModel(transformers.LlamaConfig(**kw))
    elif family == "mistral":
        model = transformers.MistralModel(transformers.MistralConfig(sliding_window=5, **kw))
    else:
        cfg = transformers.Gemma2Config(head_dim=16, sliding_window=5, **kw)
        model = transformers.Gemma2Model(cfg)
    ids = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 12, dtype=torch.long)
    if side == "left":
        mask[1, :4] = 0
    else:
        mask[1, 7:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    replaced, skipped = _replaced(model, **inputs)
    assert len(replaced) == 2 and not skipped, skipped
    assert all(s.causal is True and s.mask == "bool" for s in replaced), replaced
    windows = {s.window for s in replaced}
    assert windows == ({None} if family == "llama" else {5} if family == "mistral" else {5, None})

    # a random projection of the unpadded positions (a loss of their squares makes Gemma-2's
    # gradients ill-conditioned: Inductor alone is off by a third on its embedding's there)
    weights = torch.randn(2, 12, 64, generator=torch.Generator().manual_seed(9))
    weights *= mask[..., None]

    def loss(out):
        return (out.last_hidden_state * weights).sum()

    want, got, want_grads, grads = _compiled_matches_eager(model, inputs, loss)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, atol=2e-5,
                               rtol=1e-4)  # fmt: skip
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-3, rtol=1e-4, msg=name)


def _added_where(q, k, v, keep, fill):
    """Hand-written: `scores + where(causal & keep, 0, fill)`."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    hidden = torch.where(causal & keep[:, None, None, :], 0.0, fill)
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + hidden
    return s.softmax(-1) @ v


def _sdpa_added_where(q, k, v, keep, fill):
    """SDPA given the float mask `where(causal & keep, 0, fill)`."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.where(causal & keep[:, None, None, :], zero, fill)
    )


def _added_where_tensor_zero(q, k, v, keep, fill):
    """`scores + where(causal & keep, torch.tensor(0.0), fill)`: transformers 5.17's eager
    mask spells its zero so."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    zero = torch.tensor(0.0, dtype=q.dtype, device=q.device)
    hidden = torch.where(causal & keep[:, None, None, :], zero, fill)
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + hidden
    return s.softmax(-1) @ v


def _added_filled_zeros(q, k, v, keep, fill):
    """`scores + zeros.masked_fill(~(causal & keep), fill)`."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    zeros = torch.zeros(q.size(0), 1, t, t, dtype=q.dtype, device=q.device)
    hidden = zeros.masked_fill(~(causal & keep[:, None, None, :]), fill)
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + hidden
    return s.softmax(-1) @ v


def _added_one_minus(q, k, v, keep, fill):
    """`scores + (1 - (causal & keep).to(dtype)) * fill` (HF's older extended masks)."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    hidden = (1.0 - (causal & keep[:, None, None, :]).to(q.dtype)) * fill
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + hidden
    return s.softmax(-1) @ v


@pytest.mark.parametrize(
    "fn",
    [_added_where, _added_where_tensor_zero, _added_filled_zeros, _added_one_minus,
     _sdpa_added_where],
)  # fmt: skip
@pytest.mark.parametrize("fill", [torch.finfo(torch.float32).min, -1e9])
def test_added_where_split_only_with_an_absorbing_fill(fn, fill):
    """By hand, and as SDPA's float attn_mask: -1e9 does not absorb what is added to it (a
    fully hidden row is softmax(s - 1e9) in eager, not uniform): that mask is read whole as an
    additive tensor; finfo.min is split into the causal flag and the key mask. Both equal eager at every row; the gradients of a
    loss of the rows that see a key too (see `test_eager_additive_padding_mask_split`)."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=gen).requires_grad_() for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, :3] = False  # rows 0-2 of entry 1 see no key
    site = flashgen.explain(fn, q, k, v, keep, fill).sites[0]
    assert site.replaced, site
    split = fill < -(2.0**100)
    assert (site.causal, site.mask) == ((True, "bool") if split else (False, "add")), site
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="flashgen")
    got = compiled(q, k, v, keep, fill)
    want = fn(q, k, v, keep, fill)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    seen = torch.ones(2, 1, 9, 1)
    seen[1, :, :3] = 0
    g_got = torch.autograd.grad((got * seen).square().sum(), (q, k, v))
    g_want = torch.autograd.grad((want * seen).square().sum(), (q, k, v))
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


def _causal_and_keep(q, k, v, keep):
    """The hand-written form of HF's mask: a causal triangle & a padding entry per key."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, None, None, :])


def _keep_per_row(q, k, v, keep):
    """Not per key: the padding mask varies along the query rows too (read as a tensor)."""
    t = q.size(-2)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal & keep[:, None, :, None])


@pytest.mark.parametrize("dynamic", [False, True])
def test_causal_and_key_mask_is_split_at_every_length(dynamic):
    """`causal & keep[:, None, None, :]` becomes the causal flag and the key mask, proven for
    every length the graph accepts (dynamic: two lengths through one graph); eager's output
    and gradients at every row that sees a key. A mask that varies along the rows too is
    handed over whole (no causal flag)."""
    compiled = torch.compile(_causal_and_keep, backend="flashgen", dynamic=dynamic)
    for n in (9, 14):
        gen = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(2, 2, n, 16, generator=gen).requires_grad_() for _ in range(3))
        keep = torch.rand(2, n, generator=gen) > 0.3
        keep[:, 0] = True  # every row sees key 0
        got = compiled(q, k, v, keep)
        want = _causal_and_keep(q, k, v, keep)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)
    q, k, v = (torch.randn(2, 2, 9, 16) for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    replaced, _ = _replaced(_causal_and_keep, q, k, v, keep)
    assert len(replaced) == 1 and replaced[0].causal is True and replaced[0].mask == "bool"
    replaced, _ = _replaced(_keep_per_row, q, k, v, keep)
    assert len(replaced) == 1 and replaced[0].causal is False and replaced[0].mask == "bool"


def test_t5_relative_bias_replaced_and_its_gradient_matches_eager():
    """HF T5 passes its relative position bias (a learned embedding, plus the padding mask) to
    SDPA as an additive attn_mask that requires grad: both encoder layers' sites are replaced,
    and the output and every gradient, the bias embedding's included, equal eager's."""
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        vocab_size=64, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
        relative_attention_num_buckets=8, dropout_rate=0.0,
    )  # fmt: skip
    model = transformers.T5EncoderModel(cfg)
    ids = torch.randint(1, 64, (2, 11), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0
    replaced = _padded_batch_matches_eager(model, ids, mask)
    assert all(s.mask == "add" for s in replaced)
    bias = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    assert model.get_parameter(bias).grad.abs().sum() > 0  # the bias got its gradient


def _eager_causal_with(zero):
    """HF's eager attention over its causal mask with no padding, the mask's zero spelled as
    `zero(dtype)` builds it: transformers 5.25 `torch.zeros(())`, 5.17 `torch.tensor(0.0)`."""

    def attend(q, k, v):
        q_idx = torch.arange(q.size(-2), device=q.device)[None, None, :, None]
        kv_idx = torch.arange(k.size(-2), device=q.device)[None, None, None, :]
        causal = (kv_idx <= q_idx).expand(q.size(0), -1, q.size(-2), k.size(-2))
        mask = torch.where(causal, zero(q.dtype), torch.finfo(q.dtype).min)
        s = q @ k.transpose(-1, -2) * q.size(-1) ** -0.5 + mask
        return torch.softmax(s, -1) @ v

    return attend


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize(
    "zero",
    [
        lambda dt: torch.zeros((), dtype=dt),
        lambda dt: torch.tensor(0.0, dtype=dt),
        lambda dt: torch.scalar_tensor(0.0, dtype=dt),
    ],
    ids=["zeros", "tensor", "scalar_tensor"],
)
def test_eager_causal_mask_with_any_zero_spelling_is_causal(zero, dynamic):
    """`where(kv <= q, 0, finfo.min)` added to the scores is the causal mask whichever way the
    0 is made: the kernels get the causal flag, not the N x N tensor (with transformers 5.17's
    `torch.tensor(0.0)` the proof did not follow the constant, and HF Llama's eager attention
    with no padding read an N x N float mask); eager's output and gradients at every length."""
    attend = _eager_causal_with(zero)
    q, k, v = (torch.randn(2, 2, 9, 16) for _ in range(3))
    replaced, skipped = _replaced(attend, q, k, v)
    assert len(replaced) == 1 and not skipped, skipped
    assert (replaced[0].causal, replaced[0].mask) == (True, ""), replaced[0]
    torch._dynamo.reset()
    compiled = torch.compile(attend, backend="flashgen", dynamic=dynamic)
    for n in (9, 13):
        gen = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(2, 2, n, 16, generator=gen).requires_grad_() for _ in range(3))
        got, want = compiled(q, k, v), attend(q, k, v)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)


def _q_idx(q):
    return (torch.arange(q.size(-2), device=q.device) + 0)[None, None, :, None]


def _and_padding(q, k, v, keep, rows):
    """SDPA under HF's bidirectional padding mask as `masking_utils` builds it: a row term
    `rows` (a comparison of q_idx) `&` the padding indexed per key, broadcast to [B, 1, Sq, Sk]
    (a materialised tensor)."""
    kv_idx = torch.arange(k.size(-2), device=q.device)[None, None, None, :]
    b_idx = torch.arange(q.size(0), device=q.device)[:, None, None, None]
    mask = rows.new_ones((), dtype=torch.bool) & rows.to(q.device)
    mask = (mask & keep[b_idx, kv_idx]).expand(q.size(0), -1, q.size(-2), k.size(-2))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# (the row terms' constants are literals: an int argument, or one a closure holds, is a graph
# input under dynamic=True, as it is not in HF's code)
def _bidirectional(q, k, v, keep):
    return _and_padding(q, k, v, keep, _q_idx(q) >= 0)  # HF's row term: every row passes


def _rows_from_1(q, k, v, keep):
    return _and_padding(q, k, v, keep, _q_idx(q) >= 1)  # hides row 0


def _rows_below_6(q, k, v, keep):
    return _and_padding(q, k, v, keep, _q_idx(q) < 6)  # depends on the length


@pytest.mark.parametrize("dynamic", [False, True])
def test_bidirectional_padding_mask_read_per_key_at_every_length(dynamic):
    """`(q_idx >= 0) & keep[b, kv_idx]`: the row term holds for every row at every length (an
    arange's least value is its offset), so the mask is the padding alone and the kernels read
    it as one entry per key, self-attention and cross-attention lengths alike (the masks the
    op is called with, recorded at run time); output and gradients equal eager's at several
    lengths (one graph with dynamic shapes). Row terms that do not hold everywhere (`q_idx >= 1`
    hides row 0; `q_idx < 6` depends on the length) leave the tensor read whole, and still
    match."""
    from model_checks import recording_op

    masks: list = []
    op = recording_op(masks, lambda q, causal, args, _: tuple(args[6].shape))  # (attn_mask)
    torch._dynamo.reset()
    compiled = torch.compile(_bidirectional, dynamic=dynamic,
                             backend=flashgen.backend(op=op, fallback="eager"))  # fmt: skip
    for sq, sk in ((9, 9), (14, 14), (6, 11), (10, 7)):
        gen = torch.Generator().manual_seed(sq * sk)
        q = torch.randn(3, 2, sq, 16, generator=gen).requires_grad_()
        k, v = (torch.randn(3, 2, sk, 16, generator=gen).requires_grad_() for _ in range(2))
        keep = torch.rand(3, sk, generator=gen) > 0.4
        keep[:, 0] = True
        got, want = compiled(q, k, v, keep), _bidirectional(q, k, v, keep)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)
        replaced, skipped = _replaced(_bidirectional, q, k, v, keep)
        assert len(replaced) == 1 and not skipped, skipped
        site = replaced[0]
        assert (site.causal, site.window, site.mask, site.key_mask) == (False, None, "bool", True)
        assert "False + bool mask per key" in str(flashgen.explain(_bidirectional, q, k, v, keep))
    assert masks and all(m[-2] == 1 for m in masks), masks
    q, k, v = (torch.randn(2, 2, 9, 16) for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    for attend, visible in (
        (_rows_from_1, torch.arange(9) >= 1),
        (_rows_below_6, torch.arange(9) < 6),
    ):
        replaced, _ = _replaced(attend, q, k, v, keep)
        assert len(replaced) == 1 and not replaced[0].key_mask, attend
        torch._dynamo.reset()
        got = torch.compile(attend, backend="flashgen", dynamic=dynamic)(q, k, v, keep)
        want = attend(q, k, v, keep)
        torch.testing.assert_close(got[:, :, visible], want[:, :, visible], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_modernbert_local_layers_band_and_key_mask(attn):
    """HF ModernBERT over a padded batch: its local layers' mask (a two-sided sliding window
    & the padding, `q_idx >= 0` beside them) reaches the kernels as the band and a per-key
    mask, its global layers' as the per-key mask alone; forward and gradients at the unpadded
    positions equal eager's. With eager attention the mask is additive (finfo.min), split the
    same way."""
    from model_checks import tiny_modernbert

    model, ids, mask = tiny_modernbert(attn)
    replaced = _padded_batch_matches_eager(model, ids, mask)
    assert all(s.causal is False and s.key_mask for s in replaced), replaced
    assert sorted(str(s.window) for s in replaced) == ["(2, 2)", "None"], replaced


def _small_bart():
    """A seeded one-layer HF BART with SDPA attention and no dropout. (init_std: at BART's 0.02
    the scores are so small that q's gradients are ~1e-6, and a comparison of them could not
    fail.)"""
    torch.manual_seed(0)
    cfg = transformers.BartConfig(
        vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, attn_implementation="sdpa", init_std=0.3,
    )  # fmt: skip
    return transformers.BartForConditionalGeneration(cfg)


def test_bart_encoder_and_cross_attention_read_padding_per_key():
    """HF BART with a padded source batch: the encoder's self-attention and the decoder's
    cross-attention (queries and keys of different lengths) read the source padding per key,
    the decoder's self-attention is causal; the seq2seq logits and every gradient equal
    eager's."""
    model = _small_bart()
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 64, (3, 12), generator=gen)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, :5] = 0
    inputs = {"input_ids": ids, "attention_mask": mask,
              "decoder_input_ids": torch.randint(3, 64, (3, 7), generator=gen)}  # fmt: skip
    replaced, skipped = _replaced(model, **inputs)
    assert len(replaced) == 3 and not skipped, skipped
    kinds = sorted((s.causal, s.key_mask, s.seq_q, s.seq_k) for s in replaced)
    assert kinds == [(False, True, 7, 12), (False, True, 12, 12), (True, False, 7, 7)], kinds
    weights = torch.randn(3, 7, 64, generator=gen)

    def loss(out):
        return (out.logits * weights).sum()

    want, got, want_grads, grads = _compiled_matches_eager(model, inputs, loss)
    torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
    assert want_grads["model.encoder.layers.0.self_attn.q_proj.weight"].abs().max() > 1e-3
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-4, rtol=1e-3, msg=name)


def test_bart_generate_with_padded_source_matches_eager():
    """HF BART's `generate()` over a padded source batch, the model's forward compiled with the
    flashgen backend: the decoding steps' cross-attention (one query row over the source, its
    padding per key) and self-attention over the cache are replaced, and every step's logits
    equal eager's (greedy tokens, and the scores `generate` returns)."""
    from flashgen.compile import patterns

    model = _small_bart().eval()
    gen = torch.Generator().manual_seed(8)
    ids = torch.randint(3, 64, (3, 10), generator=gen)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, :3] = 0
    kw = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, num_beams=1,
              output_scores=True, return_dict_in_generate=True)  # fmt: skip
    want = model.generate(ids, **kw)
    torch._dynamo.reset()
    before = patterns.replaced_total()
    model.forward = torch.compile(model.forward, backend="flashgen")
    try:
        got = model.generate(ids, **kw)
    finally:
        del model.forward
        torch._dynamo.reset()
    assert patterns.replaced_total() - before >= 3
    assert torch.equal(got.sequences, want.sequences)
    for g, w in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(g, w, atol=2e-5, rtol=1e-4)


class _MaskedSDPA(torch.nn.Module):
    def __init__(self, learned_bias: bool = False):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(2, 9, 9)) if learned_bias else None

    def forward(self, q, k, v, keep):
        mask = keep[:, None, None, :] if self.bias is None else self.bias
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("dynamic", [False, True])
def test_padding_mask_from_an_input_under_dynamic_shapes(dynamic):
    model = _MaskedSDPA()
    compiled = torch.compile(model, backend="flashgen", dynamic=dynamic)
    for n in (9, 14):
        gen = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(2, 2, n, 16, generator=gen).requires_grad_() for _ in range(3))
        keep = torch.rand(2, n, generator=gen) > 0.4
        keep[:, 0] = True
        got = compiled(q, k, v, keep)
        want = model(q, k, v, keep)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        gq, gk = torch.autograd.grad(got.sum(), (q, k))
        wq, wk = torch.autograd.grad(want.sum(), (q, k))
        torch.testing.assert_close(gq, wq, atol=5e-5, rtol=1e-4)
        torch.testing.assert_close(gk, wk, atol=5e-5, rtol=1e-4)
    q, k, v = (torch.randn(2, 2, 9, 16) for _ in range(3))
    replaced, _ = _replaced(model, q, k, v, torch.ones(2, 9, dtype=torch.bool))
    assert len(replaced) == 1 and replaced[0].mask == "bool"


def test_learned_bias_replaced_and_its_gradient_matches_eager():
    """An additive mask that is a parameter (a learned bias): replaced; the output and the
    gradients of q, k, v and of the bias equal eager's."""
    model = _MaskedSDPA(learned_bias=True)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        model.bias.normal_(generator=gen)
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    replaced, skipped = _replaced(model, q, k, v, None)
    assert len(replaced) == 1 and not skipped and replaced[0].mask == "add"
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="flashgen")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    got = compiled(*leaves, None)
    got_grads = torch.autograd.grad(got.square().sum(), (*leaves, model.bias))
    want = model(*leaves, None)
    want_grads = torch.autograd.grad(want.square().sum(), (*leaves, model.bias))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for name, g, w in zip(("dq", "dk", "dv", "dbias"), got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4, msg=name)


class _BiasBesidePadding(torch.nn.Module):
    """Hand-written: a learned relative bias [1, H, T, T] added after the scale, then a padding
    mask (with `causal`: causal & padding) applied with masked_fill(finfo.min): two masks."""

    def __init__(self, causal: bool):
        super().__init__()
        self.causal = causal
        self.rel = torch.nn.Parameter(torch.randn(1, 2, 9, 9) * 2)

    def forward(self, q, k, v, pad):
        t = q.size(-2)
        s = q @ k.transpose(-1, -2) * 0.25 + self.rel[..., :t, :t]
        keep = pad[:, None, None, :]
        if self.causal:
            keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril() & keep
        s = s.masked_fill(~keep, torch.finfo(s.dtype).min)
        return s.softmax(-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_learned_bias_beside_a_padding_mask(causal):
    """A bias and a boolean mask on the same scores: one additive mask for the kernels,
    `where(keep, bias, -inf)` (with the causal flag and the per-key padding when the mask is
    `causal & keep`, else the whole mask). Output (the rows that see no key: eager's mean of
    v) and the gradients of q, k, v and the bias equal eager's."""
    torch.manual_seed(0)
    model = _BiasBesidePadding(causal)
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(3, 2, 9, 16, generator=gen).requires_grad_() for _ in range(3))
    pad = torch.ones(3, 9, dtype=torch.bool)
    pad[1, :3] = False  # left padding: with causal, rows 0-2 of entry 1 see no key
    pad[2, 6:] = False
    replaced, skipped = _replaced(model, q, k, v, pad)
    assert len(replaced) == 1 and not skipped, skipped
    site = replaced[0]
    assert site.mask == "add" and site.causal is causal and not site.alibi, site
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="flashgen")
    got = compiled(q, k, v, pad)
    want = model(q, k, v, pad)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    leaves = (q, k, v, model.rel)
    for name, g, w in zip(
        ("dq", "dk", "dv", "dbias"),
        torch.autograd.grad((got * 1.5).sum(), leaves),
        torch.autograd.grad((want * 1.5).sum(), leaves),
        strict=True,
    ):
        torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4, msg=name)


def test_arbitrary_additive_and_boolean_masks_from_inputs():
    """SDPA with an additive mask and a boolean mask computed from an input: replaced as mask
    tensors, equal to eager (forward and gradients)."""

    def additive(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def boolean(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask > -0.5)

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 11, 16, generator=gen).requires_grad_() for _ in range(3))
    mask = torch.randn(11, 11, generator=gen)
    for fn, kind in ((additive, "add"), (boolean, "bool")):
        replaced, _ = _replaced(fn, q, k, v, mask)
        assert len(replaced) == 1 and replaced[0].mask == kind
        torch._dynamo.reset()
        got = torch.compile(fn, backend="flashgen")(q, k, v, mask)
        want = fn(q, k, v, mask)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        for g, w in zip(torch.autograd.grad(got.sum(), (q, k, v)),
                        torch.autograd.grad(want.sum(), (q, k, v)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_multihead_attention_key_padding_mask(kind):
    """nn.MultiheadAttention(need_weights=False) with key_padding_mask from an input: the site
    is replaced (the mask read as a [B, 1, 1, S] tensor), forward and gradients match eager."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 2, batch_first=True)
    x = torch.randn(3, 10, 32, requires_grad=True)
    pad = torch.zeros(3, 10, dtype=torch.bool)
    pad[1, 6:] = True
    pad[2, 3:] = True
    kpm = pad if kind == "bool" else torch.zeros(3, 10).masked_fill(pad, float("-inf"))

    def f(x, kpm):
        return mha(x, x, x, key_padding_mask=kpm, need_weights=False)[0]

    replaced, skipped = _replaced(f, x, kpm)
    assert len(replaced) == 1 and not skipped, skipped
    assert replaced[0].key_mask  # (explain: "mask per key")
    torch._dynamo.reset()
    got = torch.compile(f, backend="flashgen")(x, kpm)
    want = f(x, kpm)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    gx, gw = torch.autograd.grad(got.sum(), (x, mha.in_proj_weight))
    wx, ww = torch.autograd.grad(want.sum(), (x, mha.in_proj_weight))
    torch.testing.assert_close(gx, wx, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(gw, ww, atol=5e-5, rtol=1e-4)


MHA_MASKS = [
    # attn_mask kind, key_padding_mask kind, is_causal
    ("bool", None, False),  # an arbitrary boolean mask (True hides)
    ("float", None, False),  # additive, -inf and finite values
    ("heads", None, False),  # 3-D [B * heads, L, S]
    ("bool", "bool", True),  # nn.TransformerDecoder's tgt_mask + tgt_key_padding_mask
    ("float", "float", False),  # both additive: added, as PyTorch merges them
    ("heads", "bool", True),
]
# (A boolean mask beside a floating one makes PyTorch warn, which breaks Dynamo's graph: no
# graph holds such a site.)


@pytest.mark.parametrize("am_kind,kpm_kind,is_causal", MHA_MASKS)
def test_multihead_attention_attn_mask_read_as_a_tensor(am_kind, kpm_kind, is_causal):
    """nn.MultiheadAttention(need_weights=False) with an attn_mask that is not proven causal
    (from a forward() input): the kernels read it as a mask tensor, merged with a
    key_padding_mask as PyTorch merges them (with one, PyTorch ignores is_causal and reads the
    mask). Rows that see no key (entry 2's padding covers query 0's only visible keys) are
    zeros in both. Forward and gradients match eager."""
    torch.manual_seed(0)
    heads, b, t = 2, 3, 10
    mha = torch.nn.MultiheadAttention(32, heads, batch_first=True)
    x = torch.randn(b, t, 32, requires_grad=True)
    gen = torch.Generator().manual_seed(3)
    hide = torch.rand(t, t, generator=gen) < 0.3
    hide.fill_diagonal_(False)
    hide[0] = True
    hide[0, :2] = False  # row 0 sees keys 0 and 1 only
    if am_kind == "heads":
        am = torch.rand(b * heads, t, t, generator=gen) < 0.3
        am[:, :, 0] = False
    elif am_kind == "float":
        am = torch.randn(t, t, generator=gen).masked_fill(hide, float("-inf"))
    else:
        am = hide
    kpm = None
    if kpm_kind is not None:
        pad = torch.zeros(b, t, dtype=torch.bool)
        pad[1, 7:] = True
        pad[2, :2] = True  # entry 2: row 0 sees no key
        kpm = pad if kpm_kind == "bool" else torch.zeros(b, t).masked_fill(pad, float("-inf"))

    def f(x, am, kpm):
        return mha(x, x, x, attn_mask=am, key_padding_mask=kpm, need_weights=False,
                   is_causal=is_causal)[0]  # fmt: skip

    replaced, skipped = _replaced(f, x, am, kpm)
    assert len(replaced) == 1 and not skipped, skipped
    assert replaced[0].causal is False and replaced[0].mask, replaced[0]
    assert not replaced[0].key_mask  # (an N x N attn_mask: not one entry per key)
    torch._dynamo.reset()
    got = torch.compile(f, backend="flashgen")(x, am, kpm)
    want = f(x, am, kpm)
    assert not want.isnan().any()
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    gx, gw = torch.autograd.grad(got.sum(), (x, mha.in_proj_weight))
    wx, ww = torch.autograd.grad(want.sum(), (x, mha.in_proj_weight))
    torch.testing.assert_close(gx, wx, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(gw, ww, atol=5e-5, rtol=1e-4)


def test_multihead_attention_is_causal_hint_without_padding():
    """is_causal=True beside an attn_mask from an input and no key_padding_mask: PyTorch drops
    the mask and runs causal attention, and so does the replacement (the causal flag)."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 2, batch_first=True)
    x = torch.randn(2, 9, 32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(9)

    def f(x, am):
        return mha(x, x, x, attn_mask=am, need_weights=False, is_causal=True)[0]

    replaced, skipped = _replaced(f, x, causal)
    assert len(replaced) == 1 and replaced[0].causal is True and not replaced[0].mask, replaced
    torch._dynamo.reset()
    got = torch.compile(f, backend="flashgen")(x, causal)
    torch.testing.assert_close(got, f(x, causal), atol=2e-5, rtol=1e-4)


def test_transformer_decoder_with_padding_masks():
    """nn.Transformer in training mode the way its tutorials train it: a causal tgt_mask and
    key padding masks for source and target (boolean, one dtype: a float tgt_mask beside a
    boolean padding mask makes PyTorch warn, which breaks Dynamo's graph and leaves the whole
    model eager under any backend). Every attention site is replaced (the decoder's
    self-attention reads its mask as a tensor), and the output and gradients match eager
    (dropout 0)."""
    torch.manual_seed(0)
    model = torch.nn.Transformer(
        d_model=64, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64,
        dropout=0.0, batch_first=True,
    )  # fmt: skip
    src, tgt = torch.randn(2, 9, 64), torch.randn(2, 7, 64, requires_grad=True)
    src_pad = torch.zeros(2, 9, dtype=torch.bool)
    src_pad[1, 6:] = True
    tgt_pad = torch.zeros(2, 7, dtype=torch.bool)
    tgt_pad[1, 5:] = True
    tgt_mask = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
    kw = dict(
        tgt_mask=tgt_mask, tgt_is_causal=True, src_key_padding_mask=src_pad,
        tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad,
    )  # fmt: skip
    report = flashgen.explain(model, src, tgt, **kw)
    assert (report.found, report.replaced) == (3, 3), str(report)
    assert not report.breaks, str(report)
    # PyTorch's own graph break, which explain names: a tgt_mask without tgt_is_causal makes
    # PyTorch read the mask's values (.item()) to tell whether it is causal
    unhinted = {name: value for name, value in kw.items() if name != "tgt_is_causal"}
    report = flashgen.explain(model, src, tgt, **unhinted)
    assert any("item()" in b for b in report.breaks), str(report)
    assert f"graph break: {report.breaks[0]}" in str(report)
    torch._dynamo.reset()
    got = torch.compile(model, backend="flashgen")(src, tgt, **kw)
    want = model(src, tgt, **kw)
    valid = ~tgt_pad[..., None]
    torch.testing.assert_close(got * valid, want * valid, atol=2e-5, rtol=1e-4)
    # a loss of random weights: the model ends in a LayerNorm, whose rows' sum (and sum of
    # squares) does not move, so a plain sum would have no gradient to compare
    r = torch.randn(got.shape, generator=torch.Generator().manual_seed(7)) * valid
    params = (tgt, model.decoder.layers[0].self_attn.in_proj_weight)
    g = torch.autograd.grad((got * r).sum(), params)
    w = torch.autograd.grad((want * r).sum(), params)
    for a, e in zip(g, w, strict=True):
        assert e.abs().max() > 1e-2
        torch.testing.assert_close(a, e, atol=5e-5, rtol=1e-4)


def test_added_fill_that_is_inf_in_the_mask_dtype_is_not_split():
    """float32's min is -inf in bfloat16: `(1 - keep.to(bf16)) * finfo(float32).min` hides
    with -inf (a row it hides whole is NaN in eager, not the uniform softmax the split's rows
    get), so that mask is read whole; bfloat16's own min is split."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=gen).bfloat16() for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, :3] = False
    for fill, split in (
        (torch.finfo(torch.float32).min, False),
        (torch.finfo(torch.bfloat16).min, True),
    ):
        site = flashgen.explain(_added_one_minus, q, k, v, keep, fill).sites[0]
        assert site.replaced, site
        assert (site.causal, site.mask) == ((True, "bool") if split else (False, "add")), site


MHA_DRAWS = [
    # attn_mask: None | "bool" | "float" | "bool3" | "float3" (3-D, per head) | "causal" (a
    # float causal mask built in forward()); key_padding_mask: None | "bool" | "float";
    # is_causal; batch_first; self-attention (else cross-attention, another key length)
    (am, kpm, hint, bf, self_attn)
    for am in (None, "bool", "float", "bool3", "causal")
    for kpm in (None, "bool", "float")
    for hint in (False, True)
    for bf in (True, False)
    for self_attn in (True, False)
    if not (hint and am is None)  # (PyTorch refuses is_causal without a mask)
    if not (am == "causal" and not self_attn)  # (a causal mask is square)
][::5]  # every fifth of the 96 combinations: 20 cases, each property drawn several times


@pytest.mark.parametrize("am,kpm,hint,bf,self_attn", MHA_DRAWS)
def test_multihead_attention_mask_combinations_match_eager(am, kpm, hint, bf, self_attn):
    """nn.MultiheadAttention over a spread of its mask arguments (boolean and additive,
    2-D and 3-D attn_mask, a causal mask built in forward(), key padding of either kind, the
    is_causal hint, batch_first both ways, self- and cross-attention): the compiled module's
    output and gradients equal eager's, whether the site was replaced or (a boolean mask beside
    a floating one: PyTorch's warning breaks the graph) left to PyTorch."""
    torch.manual_seed(0)
    b, heads, tq = 2, 2, 7
    tk = tq if self_attn else 10
    mha = torch.nn.MultiheadAttention(32, heads, batch_first=bf)
    gen = torch.Generator().manual_seed(5)
    xq = torch.randn(b, tq, 32, generator=gen)
    xk = xq if self_attn else torch.randn(b, tk, 32, generator=gen)
    if not bf:
        xq, xk = xq.transpose(0, 1), xk.transpose(0, 1)
    xq.requires_grad_()
    masks = {}
    if am in ("bool", "float"):
        hide = torch.rand(tq, tk, generator=gen) < 0.3
        hide[:, 0] = False
        masks["attn_mask"] = (
            hide
            if am == "bool"
            else torch.randn(tq, tk, generator=gen).masked_fill(hide, float("-inf"))
        )
    elif am == "bool3":
        hide = torch.rand(b * heads, tq, tk, generator=gen) < 0.3
        hide[..., 0] = False
        masks["attn_mask"] = hide
    if kpm is not None:
        pad = torch.zeros(b, tk, dtype=torch.bool)
        pad[1, tk - 3 :] = True
        masks["key_padding_mask"] = (
            pad if kpm == "bool" else torch.zeros(b, tk).masked_fill(pad, float("-inf"))
        )

    def f(xq, xk, masks):
        kw = dict(masks)
        if am == "causal":
            kw["attn_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(tq)
        return mha(xq, xk, xk, need_weights=False, is_causal=hint, **kw)[0]

    from flashgen.compile.patterns import counters

    torch._dynamo.reset()
    counters.clear()
    got = torch.compile(f, backend="flashgen")(xq, xk, masks)
    want = f(xq, xk, masks)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    mixed = None not in (am, kpm) and (am in ("float", "causal")) != (kpm == "float")
    assert counters["mha.replaced"] == (0 if mixed else 1), dict(counters)
    r = torch.randn(want.shape, generator=gen)
    params = (xq, mha.in_proj_weight)
    for g, w in zip(torch.autograd.grad((got * r).sum(), params),
                    torch.autograd.grad((want * r).sum(), params), strict=True):  # fmt: skip
        torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("bf", [True, False])
def test_multihead_attention_with_kdim_vdim_replaced(bf):
    """nn.MultiheadAttention with keys and values of other widths (kdim, vdim: its own k and v
    projection weights) attending over another sequence with key padding: the site is
    replaced (the projections make every head embed_dim / heads wide), and output and
    gradients (the query, the k and v projection weights) equal eager's at lengths of one
    dynamic graph."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 2, kdim=20, vdim=24, batch_first=bf)

    def f(q, k, v, pad):
        return mha(q, k, v, key_padding_mask=pad, need_weights=False)[0]

    from flashgen.compile.patterns import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(f, backend="flashgen", dynamic=True)
    gen = torch.Generator().manual_seed(3)
    params = (mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight)
    for n, m in ((5, 7), (9, 4)):
        q, k, v = (torch.randn(2, t, w, generator=gen) for t, w in ((n, 32), (m, 20), (m, 24)))
        if not bf:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))
        pad = torch.zeros(2, m, dtype=torch.bool)
        pad[1, m - 2 :] = True
        q.requires_grad_()
        got, want = compiled(q, k, v, pad), f(q, k, v, pad)
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
        r = torch.randn(want.shape, generator=gen)
        for g, w in zip(torch.autograd.grad((got * r).sum(), (q, *params)),
                        torch.autograd.grad((want * r).sum(), (q, *params)), strict=True):  # fmt: skip
            torch.testing.assert_close(g, w, atol=5e-5, rtol=1e-4)
    assert counters["mha.replaced"] >= 1 and not counters["mha.skipped"], dict(counters)


def _added_where_full(q, k, v, keep, fill):
    """`scores + where(full & keep, 0, fill)`: HF's encoder padding, nothing causal in it."""
    t = q.size(-2)
    full = torch.ones(t, t, dtype=torch.bool, device=q.device)
    hidden = torch.where(full & keep[:, None, None, :], 0.0, fill)
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 + hidden
    return s.softmax(-1) @ v


def test_a_non_absorbing_padding_fill_is_read_one_row_per_key():
    """An encoder's additive padding with a fill that does not absorb the scores (-1e9) is not
    split into a boolean key mask, but its rows are all alike: the kernels read its first row,
    a per-key additive mask with its own values (`mask_reading.key_row`); equal to eager at
    every row, the entry whose keys are all hidden included; the gradients of a loss of the
    rows that see a key (the kernels give rows that see none no gradient, as for the mask read
    whole: `mask_reading.additive_split`)."""
    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 2, 9, 16, generator=gen).requires_grad_() for _ in range(3))
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[0, 6:] = False
    keep[1] = False
    site = flashgen.explain(_added_where_full, q, k, v, keep, -1e9).sites[0]
    assert site.replaced and site.mask == "add" and site.key_mask and not site.causal, site
    torch._dynamo.reset()
    compiled = torch.compile(_added_where_full, backend="flashgen")
    got = compiled(q, k, v, keep, -1e9)
    want = _added_where_full(q, k, v, keep, -1e9)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    seen = keep.any(-1).float()[:, None, None, None]
    g_got = torch.autograd.grad((got * seen).square().sum(), (q, k, v))
    g_want = torch.autograd.grad((want * seen).square().sum(), (q, k, v))
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
