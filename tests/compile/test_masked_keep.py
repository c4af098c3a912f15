"""Masked SDPA and nn.MultiheadAttention calls too small for flashgen's masked path are left to
PyTorch (`flashgen.compile.patterns.choice.masked_keep_reason`, issue 15 for masks), and so is
small hand-written attention with a per-key or dense additive mask (`HAND_WRITTEN_MIN_FLOPS`).

The rule applies to CUDA sites; here the CPU is added to its devices (`MASKED_RULE_DEVICES`), so
the decisions a GPU graph would get are taken on CPU tensors: which sites are kept (by kind of
mask, head dim, backward, causal halving, static sizes), that forcing flashgen's kernels turns
it off, and that a kept site compiles to what eager computes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import flashgen
from flashgen.compile import patterns
from flashgen.compile.patterns import choice
from flashgen.runtime import dispatch


@pytest.fixture(autouse=True)
def cpu_rule(monkeypatch):
    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", ("cuda", "cpu"))
    monkeypatch.delenv("FLASHGEN_IMPL", raising=False)
    dispatch.set_impl(None)
    torch._dynamo.reset()
    yield
    dispatch.set_impl(None)
    torch._dynamo.reset()


def _per_key(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _per_key_causal(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask & torch.ones(
        q.shape[2], k.shape[2], dtype=torch.bool).tril())  # fmt: skip


def _inputs(b, h, s, d, *, grad=False, dense=False):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, generator=gen).requires_grad_(grad) for _ in range(3))
    keep = torch.arange(s)[None, :] < torch.tensor([s - 3] + [s] * (b - 1))[:, None]
    if dense:
        mask = torch.rand(b, 1, s, s, generator=gen) < 0.7
        mask[..., 0] = True
    else:
        mask = keep[:, None, None, :]
    return q, k, v, mask


def _site(fn, *args):
    (site,) = flashgen.explain(fn, *args).sites
    return site


def _flops(b, h, s, d, causal=False):
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


@pytest.mark.parametrize(
    ("shape", "grad", "dense", "kept"),
    [
        # per-key mask, head dim 64: 19 GFLOP forward, 50 with a backward
        ((4, 12, 512, 64), False, False, True),  # BERT-like, 3.2 GFLOP
        ((4, 12, 512, 64), True, False, True),
        ((1, 16, 2048, 64), False, False, True),  # 17 GFLOP < 19: kept
        ((2, 16, 2048, 64), False, False, False),  # 34 GFLOP: replaced
        ((4, 16, 2048, 64), True, False, False),  # 69 GFLOP with a backward: replaced
        ((2, 16, 2048, 64), True, False, True),  # 34 GFLOP with a backward: kept
        # head dim 128: 50 / 50 GFLOP
        ((2, 16, 2048, 128), True, False, False),  # 69 GFLOP: replaced
        ((1, 16, 2048, 128), True, False, True),  # 34 GFLOP: kept
        ((1, 16, 2048, 128), False, False, True),  # 34 GFLOP forward: kept
        # dense mask, head dim 64: 15 GFLOP forward, 30 with a backward
        ((1, 16, 1024, 64), False, True, True),  # 4.3 GFLOP: kept
        ((4, 16, 1024, 64), False, True, False),  # 17 GFLOP: replaced
        ((4, 16, 1024, 64), True, True, True),  # 17 GFLOP with a backward: kept
        ((2, 16, 2048, 64), True, True, False),  # 34 GFLOP with a backward: replaced
        # dense, head dim 128: 30 / 60 GFLOP
        ((4, 16, 1024, 128), True, True, True),  # 34 GFLOP with a backward: kept
        ((2, 16, 2048, 128), True, True, False),  # 69 GFLOP with a backward: replaced
    ],
)
def test_small_masked_calls_are_left_to_pytorch(shape, grad, dense, kept):
    site = _site(_per_key, *_inputs(*shape, grad=grad, dense=dense))
    assert site.replaced is not kept, site.reason
    if kept:
        least = choice.MASKED_MIN_FLOPS[(dense, shape[3] >= 128, grad)]
        assert _flops(*shape) < least
        assert site.reason.startswith("left to PyTorch: a ")
        assert f"{_flops(*shape) / 1e9:.1f} GFLOP" in site.reason


def test_causal_calls_count_half_their_scores():
    """A per-key mask beside a causal one: the site is causal with a per-key mask, and its work
    is half the scores' (34 GFLOP of scores, 17 counted: kept without a backward)."""
    q, k, v, mask = _inputs(2, 16, 2048, 64)
    site = _site(_per_key_causal, q, k, v, mask)
    assert site.causal and site.key_mask, site
    assert not site.replaced and "17.2 GFLOP" in site.reason, site.reason
    site = _site(_per_key, q, k, v, mask)  # the same work without causal: replaced
    assert site.replaced, site.reason


def test_forcing_flashgens_kernels_replaces_them(monkeypatch):
    args = _inputs(2, 4, 64, 32)
    assert not _site(_per_key, *args).replaced
    monkeypatch.setenv("FLASHGEN_IMPL", "flashgen")
    assert _site(_per_key, *args).replaced
    monkeypatch.delenv("FLASHGEN_IMPL")
    dispatch.set_impl("flashgen")
    assert _site(_per_key, *args).replaced


def test_the_rule_is_off_on_devices_it_was_not_measured_on(monkeypatch):
    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", ("cuda",))
    assert _site(_per_key, *_inputs(2, 4, 64, 32)).replaced


def test_symbolic_sizes_are_judged_at_the_traced_shape():
    """A graph whose length is symbolic (Dynamo's automatic dynamic shapes, after a batch of
    another length) is judged at its traced length: kept when that is small, replaced when it
    is large."""
    for s, kept in ((64, True), (2048, False)):
        q, k, v, mask = _inputs(4, 16, s, 64)
        for t in (q, k, v):
            torch._dynamo.mark_dynamic(t, 2)
        torch._dynamo.mark_dynamic(mask, 3)
        site = _site(_per_key, q, k, v, mask)
        assert site.replaced is not kept, site.reason
        if kept:
            assert "at its traced size" in site.reason, site.reason


def test_a_dynamic_graph_traced_short_keeps_pytorchs_call_for_every_length():
    """torch.compile with dynamic=True, traced at a small length: one graph, PyTorch's SDPA
    kept in it, its results eager's at another length too."""
    before = patterns.counters["sdpa.kept"]
    compiled = torch.compile(_per_key, backend="flashgen", dynamic=True, fullgraph=True)
    for s in (37, 53):
        q, k, v, mask = _inputs(2, 4, s, 16)
        torch.testing.assert_close(compiled(q, k, v, mask), _per_key(q, k, v, mask))
    assert patterns.counters["sdpa.kept"] == before + 1  # traced once


def test_multihead_attention_with_a_key_padding_mask():
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(2, 32, 64)
    pad = torch.zeros(2, 32, dtype=torch.bool)
    pad[1, -5:] = True

    def f(x, pad):
        return mha(x, x, x, key_padding_mask=pad, need_weights=False)[0]

    (site,) = flashgen.explain(f, x, pad).sites
    assert site.kind == "mha" and not site.replaced, site
    assert "with a backward" in site.reason  # the module's weights require grad


def test_a_kept_site_compiles_to_eagers_result():
    q, k, v, mask = _inputs(2, 4, 37, 16, grad=True)
    before = patterns.counters["sdpa.kept"]
    compiled = torch.compile(_per_key, backend="flashgen", fullgraph=True)
    out = compiled(q, k, v, mask)
    assert patterns.counters["sdpa.kept"] == before + 1
    want = _per_key(q, k, v, mask)
    torch.testing.assert_close(out, want)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    want_grads = torch.autograd.grad(want.sum(), (q, k, v))
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)


def test_dropout_beside_the_mask_takes_the_same_rule():
    """SDPA's dropout_p with a mask (nn.Transformer in training): PyTorch's call takes both, so
    a small call is kept; a window beside the mask is flashgen's only, so it is replaced."""

    def dropped(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)

    site = _site(dropped, *_inputs(2, 4, 64, 32, grad=True))
    assert site.dropout == 0.1 and not site.replaced, site
    assert "per-key masked call with dropout" in site.reason, site.reason

    def windowed(q, k, v, mask):
        i = torch.arange(q.shape[2])
        band = (i[:, None] - i[None, :]).abs() <= 8
        return F.scaled_dot_product_attention(q, k, v, attn_mask=band & mask)

    site = _site(windowed, *_inputs(2, 4, 64, 32, grad=True))
    assert site.window is not None and site.replaced, site


def test_per_key_masks_with_dropout_take_their_own_thresholds():
    """A per-key masked call with dropout is replaced from MASKED_MIN_FLOPS_DROPOUT's smaller
    thresholds (SDPA's dropout path with a mask costs it more): 34 GFLOP with a backward is
    replaced with dropout and kept without; 17 GFLOP with a backward is kept either way."""

    def dropped(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)

    for shape, kept_with, kept_without in (((2, 16, 2048, 64), False, True),
                                           ((1, 16, 2048, 64), True, True)):  # fmt: skip
        args = _inputs(*shape, grad=True)
        with_drop, without = _site(dropped, *args), _site(_per_key, *args)
        assert with_drop.replaced is not kept_with, with_drop.reason
        assert without.replaced is not kept_without, without.reason
        if kept_with:
            assert "from 30 GFLOP" in with_drop.reason, with_drop.reason


def test_dense_additive_masks_take_their_own_thresholds():
    """A dense additive mask runs without the block lists that made dense boolean masks win
    from 15 / 30 GFLOP: it is judged by MASKED_MIN_FLOPS_ADDITIVE, with a backward and forward
    alone (69 GFLOP at head dim 64 kept both ways; the boolean mask replaced)."""
    q, k, v, mask = _inputs(4, 16, 2048, 64, grad=True, dense=True)
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    site = _site(_per_key, q, k, v, bias)
    assert site.mask == "add" and not site.key_mask and not site.replaced, site
    assert "from 200 GFLOP" in site.reason, site.reason
    assert _site(_per_key, q, k, v, mask).replaced
    q, k, v, _ = _inputs(4, 16, 2048, 64, dense=True)
    forward_only = _site(_per_key, q, k, v, bias)
    assert not forward_only.replaced and "from 200 GFLOP" in forward_only.reason, forward_only
    assert _site(_per_key, q, k, v, mask).replaced


def test_calls_with_fewer_query_rows_than_keys_are_replaced():
    """A decode step or a prefill chunk over a KV cache (few query rows, many keys) is not what
    the thresholds were measured on: replaced, however few its FLOPs."""
    q, _, _, _ = _inputs(2, 4, 1, 32)
    _, k, v, mask = _inputs(2, 4, 64, 32)
    site = _site(_per_key, q, k, v, mask)
    assert site.seq_q == 1 and site.seq_k == 64 and site.replaced, site


def test_modernbert_with_its_global_layer_kept_and_its_local_layer_replaced():
    """HF ModernBERT (SDPA attention) over a padded batch with the rule on: the global layer's
    per-key masked call is small enough to keep, the local layer's window is flashgen's only,
    so one graph holds PyTorch's call beside the op, their mask computations shared; the
    compiled model's output and gradients at the unpadded positions equal eager's."""
    pytest.importorskip("transformers")
    from model_checks import tiny_modernbert

    model, ids, mask = tiny_modernbert()
    sites = flashgen.explain(model, input_ids=ids, attention_mask=mask).sites
    kept = [s for s in sites if not s.replaced]
    replaced = [s for s in sites if s.replaced]
    assert len(kept) == 1 and kept[0].window is None, sites
    assert kept[0].reason.startswith("left to PyTorch: a per-key masked call"), kept[0].reason
    assert len(replaced) == 1 and replaced[0].window == (2, 2), sites
    valid = mask.bool()[..., None]
    weights = torch.randn(3, 13, 32, generator=torch.Generator().manual_seed(4)) * valid
    torch._dynamo.reset()
    want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    (want * weights).sum().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    compiled = torch.compile(model, backend="flashgen")
    got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
    (got * weights).sum().backward()
    torch.testing.assert_close(got * valid, want * valid, atol=2e-5, rtol=1e-4)
    qkv = [n for n in want_grads if n.endswith("Wqkv.weight")]
    assert len(qkv) == 2 and all(want_grads[n].abs().max() > 1e-3 for n in qkv), qkv
    for name, g in want_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, g, atol=1e-4,
                                   rtol=1e-3, msg=name)  # fmt: skip


def _hand_written(q, k, v, bias):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias, dim=-1) @ v


def test_hand_written_dense_additive_masks_take_their_own_thresholds(monkeypatch):
    """Hand-written attention with a dense additive mask (T5's learned relative bias) is kept
    below HAND_WRITTEN_MIN_FLOPS (200 GFLOP at head dim 64, 100 at 128), replaced from it; a
    dense boolean mask is not what the rule is for: replaced."""
    q, k, v, mask = _inputs(4, 16, 1024, 64, grad=True, dense=True)  # 17 GFLOP
    bias = torch.randn(1, 16, 1024, 1024, requires_grad=True)
    site = _site(_hand_written, q, k, v, bias)
    assert site.kind not in ("sdpa", "mha") and site.mask == "add" and not site.key_mask, site
    assert not site.replaced and site.reason.startswith("left as written"), site.reason
    assert "a dense additive mask" in site.reason and "from 200 GFLOP" in site.reason, site
    assert "with a backward" in site.reason, site.reason
    q128, k128, v128, _ = _inputs(1, 16, 1024, 128)  # 8.6 GFLOP, forward alone
    site = _site(_hand_written, q128, k128, v128, bias.detach())
    assert not site.replaced and "from 100 GFLOP" in site.reason, site.reason
    assert "with a backward" not in site.reason, site.reason
    monkeypatch.setitem(choice.HAND_WRITTEN_MIN_FLOPS, (True, False, True), 17e9)
    assert _site(_hand_written, q, k, v, bias).replaced  # 17.2 GFLOP >= 17

    def boolean(q, k, v, mask):
        scores = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~mask, -1e9)
        return torch.softmax(scores, dim=-1) @ v

    site = _site(boolean, q, k, v, mask)
    assert site.mask == "bool" and not site.key_mask and site.replaced, site


def test_hand_written_per_key_masks_take_their_own_thresholds():
    """Hand-written attention with a per-key mask (HF BERT's eager attention adds a [B, 1, 1,
    N] padding bias) is kept below 25 GFLOP whatever the head dim and the backward, additive or
    boolean, and replaced from it (BERT's eager sites: 6.4 GFLOP lost, 25.8 won)."""
    pad = torch.zeros(4, 1, 1, 512)
    pad[0, ..., -3:] = float("-inf")
    q, k, v, _ = _inputs(4, 12, 512, 64, grad=True)  # BERT at 4 x 512: 3.2 GFLOP
    site = _site(_hand_written, q, k, v, pad)
    assert site.key_mask and site.mask == "add" and not site.replaced, site
    assert "a per-key mask" in site.reason and "from 25 GFLOP" in site.reason, site.reason

    def boolean(q, k, v, keep):
        scores = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(~keep, -1e9)
        return torch.softmax(scores, dim=-1) @ v

    site = _site(boolean, q, k, v, pad == 0)
    assert site.key_mask and site.mask == "bool" and not site.replaced, site
    q128, k128, v128, _ = _inputs(4, 12, 512, 128)  # 6.4 GFLOP, forward alone, head dim 128
    site = _site(_hand_written, q128, k128, v128, pad)
    assert not site.replaced and "from 25 GFLOP" in site.reason, site.reason
    assert "with a backward" not in site.reason, site.reason
    q, k, v, _ = _inputs(32, 12, 512, 64)  # 25.8 GFLOP: replaced
    pad = torch.zeros(32, 1, 1, 512)
    pad[0, ..., -3:] = float("-inf")
    assert _site(_hand_written, q, k, v, pad).replaced


def test_t5s_encoder_keeps_its_small_sites_and_compiles_to_eagers_result():
    """HF T5's encoder with eager attention over a padded batch: the relative position bias
    and the padding reach the scores as one dense additive mask, and its small sites are left
    as written; the compiled model's output and the bias table's gradient equal eager's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(d_model=32, num_heads=2, d_kv=16, d_ff=64, num_layers=2,
                                dropout_rate=0.0, vocab_size=50)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(cfg)
    model.set_attn_implementation("eager")
    ids = torch.randint(1, 50, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 8:] = 0
    sites = flashgen.explain(model, input_ids=ids, attention_mask=mask).sites
    assert len(sites) == 2 and all(not s.replaced for s in sites), sites
    assert all(s.reason.startswith("left as written") for s in sites), sites
    table = model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight
    torch._dynamo.reset()
    want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    (want_grad,) = torch.autograd.grad(want.square().sum(), table)
    compiled = torch.compile(model, backend="flashgen")
    before = patterns.counters["matmul.kept"]
    out = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
    assert patterns.counters["matmul.kept"] == before + 2
    (grad,) = torch.autograd.grad(out.square().sum(), table)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(grad, want_grad)


def test_a_per_key_bias_beside_a_causal_mask_takes_the_per_key_thresholds():
    """A floating bias of one entry per key beside a proven causal mask (BLOOM's [B * H, 1, N]
    bias where it is not proven ALiBi) reaches the op combined into one tensor that is still one
    entry per key: it takes the per-key threshold (25 GFLOP), not the dense additive one, so a
    large such site stays flashgen's (T5's dense bias at the same size is kept)."""

    def biased_causal(q, k, v, bias):
        n = q.shape[2]
        scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5 + bias
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    q, k, v, _ = _inputs(4, 16, 2048, 128, grad=True)  # 68.7 GFLOP causal: >= 25, < 100
    gen = torch.Generator().manual_seed(5)
    per_key = torch.randn(4, 16, 1, 2048, generator=gen)
    site = _site(biased_causal, q, k, v, per_key)
    assert site.causal and site.mask == "add" and site.replaced, site
    dense = torch.randn(1, 16, 2048, 2048, generator=gen)
    site = _site(biased_causal, q, k, v, dense)
    assert not site.replaced and "a dense additive mask" in site.reason, site.reason
    q, k, v, _ = _inputs(1, 4, 512, 64, grad=True)  # 0.3 GFLOP: kept as a per-key mask
    site = _site(biased_causal, q, k, v, per_key[:1, :4, :, :512])
    assert not site.replaced and "a per-key mask" in site.reason, site.reason


def _causal_hand_written(q, k, v):
    n = q.shape[2]
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    hidden = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1) @ v


def _plain_hand_written(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v


def test_small_hand_written_attention_in_training_is_left_as_written(monkeypatch):
    """Hand-written attention without a mask tensor, causal or not, whose gradient is wanted
    stays as written below HAND_WRITTEN_PLAIN_MIN_FLOPS (8 GFLOP, causal counting half: HF
    Llama's and BERT's eager sites trained at 0.91-1.07x Inductor at 3.2-6.4, mostly below);
    replaced from it, without a gradient, below head dim 64, with symbolic sizes, and while
    flashgen's kernels are forced. With attention dropout and no causal structure the threshold
    is HAND_WRITTEN_PLAIN_MIN_FLOPS_DROPOUT (25 GFLOP); causal sites with dropout keep 8."""
    q, k, v, _ = _inputs(4, 12, 512, 64, grad=True)  # 3.2 GFLOP, causal 1.6
    for fn, what, gflop in ((_causal_hand_written, "causal attention", 1.6),
                            (_plain_hand_written, "attention", 3.2)):  # fmt: skip
        site = _site(fn, q, k, v)
        assert site.mask == "" and not site.replaced, site
        assert site.reason.startswith(f"left as written: {what} of {gflop} GFLOP with a backward")
        assert "from 8 GFLOP" in site.reason, site.reason
    assert _site(_causal_hand_written, *_inputs(4, 12, 512, 64)[:3]).replaced  # no gradient
    big = _inputs(10, 12, 512, 64, grad=True)[:3]  # 8.05 GFLOP (causal 4.0)
    assert _site(_plain_hand_written, *big).replaced
    assert not _site(_causal_hand_written, *big).replaced

    def dropped(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1)
        return F.dropout(p, 0.1, training=True) @ v

    site = _site(dropped, q, k, v)
    assert site.dropout == 0.1 and not site.replaced, site
    assert site.reason.startswith("left as written: attention with dropout of 3.2 GFLOP")
    assert "from 25 GFLOP" in site.reason, site.reason
    assert not _site(dropped, *big).replaced  # 8.05 GFLOP: kept with dropout, replaced without
    assert _site(dropped, *_inputs(32, 12, 512, 64, grad=True)[:3]).replaced  # 25.8 GFLOP

    def causal_dropped(q, k, v):
        n = q.shape[-2]
        s = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).masked_fill(
            torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))  # fmt: skip
        return F.dropout(torch.softmax(s, dim=-1), 0.1, training=True) @ v

    site = _site(causal_dropped, q, k, v)  # 1.6 GFLOP
    assert site.causal and site.dropout == 0.1 and not site.replaced, site
    assert site.reason.startswith("left as written: causal attention with dropout of 1.6 GFLOP")
    assert "from 8 GFLOP" in site.reason, site.reason
    assert _site(causal_dropped, *_inputs(20, 12, 512, 64, grad=True)[:3]).replaced  # 8.05
    narrow = _inputs(4, 12, 512, 32, grad=True)[:3]  # head dim 32: not measured
    assert _site(_causal_hand_written, *narrow).replaced
    for t in (q, k, v):
        torch._dynamo.mark_dynamic(t, 2)
    site = _site(_causal_hand_written, q, k, v)
    assert site.replaced, site.reason
    monkeypatch.setenv("FLASHGEN_IMPL", "flashgen")
    assert _site(_causal_hand_written, *_inputs(4, 12, 512, 64, grad=True)[:3]).replaced


def test_a_kept_small_hand_written_site_trains_as_eager():
    """A kept causal site compiles to eager's output and gradients (Inductor's own graph)."""
    q, k, v, _ = _inputs(2, 2, 24, 64, grad=True)
    compiled = torch.compile(_causal_hand_written, backend="flashgen")
    before = patterns.counters["matmul.kept"]
    out = compiled(q, k, v)
    assert patterns.counters["matmul.kept"] == before + 1
    want = _causal_hand_written(q, k, v)
    torch.testing.assert_close(out, want)
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    ref = torch.autograd.grad(want, (q, k, v), do)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


def _sdpa_dropped(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)


def _sdpa_causal_dropped(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)


def test_small_sdpa_calls_with_dropout_in_training_are_left_to_pytorch(monkeypatch):
    """An SDPA call whose only extra is dropout stays PyTorch's below SDPA_DROPOUT_MIN_FLOPS (19
    GFLOP, causal counting half) when a gradient flows (HF Llama's and BERT's SDPA sites trained
    at 0.81-1.01x Inductor at 3.2-9.7 GFLOP, 0.83-1.00x at 12.9 on one host); replaced from it,
    without a gradient, and while flashgen's kernels are forced; a symbolic graph is judged at
    its traced shape."""
    q, k, v, _ = _inputs(4, 12, 512, 64, grad=True)  # 3.2 GFLOP, causal 1.6
    for fn, what, gflop in ((_sdpa_causal_dropped, "causal call", 1.6),
                            (_sdpa_dropped, "call", 3.2)):  # fmt: skip
        site = _site(fn, q, k, v)
        assert site.dropout == 0.1 and not site.replaced, site
        assert site.reason.startswith(
            f"left to PyTorch: a {what} with dropout of {gflop} GFLOP with a backward"
        ), site.reason
        assert "from 19 GFLOP" in site.reason, site.reason
    assert _site(_sdpa_dropped, *_inputs(4, 12, 512, 64)[:3]).replaced  # no gradient
    mid = _inputs(16, 12, 512, 64, grad=True)[:3]  # 12.9 GFLOP: lost on one host, kept
    assert not _site(_sdpa_dropped, *mid).replaced
    big = _inputs(24, 12, 512, 64, grad=True)[:3]  # 19.3 GFLOP (causal 9.7)
    assert _flops(24, 12, 512, 64) >= choice.SDPA_DROPOUT_MIN_FLOPS
    assert _site(_sdpa_dropped, *big).replaced
    assert not _site(_sdpa_causal_dropped, *big).replaced
    assert _site(_sdpa_causal_dropped, *_inputs(48, 12, 512, 64, grad=True)[:3]).replaced
    assert _site(_sdpa_dropped, *_inputs(4, 12, 512, 32, grad=True)[:3]).replaced  # head dim 32
    for t in (q, k, v):
        torch._dynamo.mark_dynamic(t, 2)
    site = _site(_sdpa_dropped, q, k, v)
    assert not site.replaced and "at its traced size" in site.reason, site.reason
    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", ("cuda",))
    assert _site(_sdpa_dropped, *_inputs(4, 12, 512, 64, grad=True)[:3]).replaced  # (CPU)
    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", ("cuda", "cpu"))
    monkeypatch.setenv("FLASHGEN_IMPL", "flashgen")
    assert _site(_sdpa_dropped, *_inputs(4, 12, 512, 64, grad=True)[:3]).replaced


def test_multihead_attention_with_dropout_takes_the_dropout_rule():
    """nn.MultiheadAttention with dropout in training passes dropout_p to SDPA: a small layer
    with a gradient is left to PyTorch; in eval mode (no dropout) the plain rules apply."""
    mha = torch.nn.MultiheadAttention(256, 4, dropout=0.1, batch_first=True)
    x = torch.randn(2, 64, 256)

    def layer(x):
        return mha(x, x, x, need_weights=False)[0]

    (site,) = flashgen.explain(layer, x).sites
    assert site.kind == "mha" and site.dropout == 0.1 and not site.replaced, site
    assert "with dropout of" in site.reason, site.reason
    mha.eval()
    torch._dynamo.reset()
    (site,) = flashgen.explain(layer, x).sites
    assert not site.dropout and "dropout" not in (site.reason or ""), site


def test_a_kept_sdpa_site_with_dropout_trains_as_pytorch():
    """A kept site is PyTorch's own call: with Inductor's random numbers drawn as eager draws
    them (`fallback_random`), the compiled output and gradients are eager's, dropout included."""
    q, k, v, _ = _inputs(2, 2, 24, 64, grad=True)
    compiled = torch.compile(_sdpa_causal_dropped, backend="flashgen")
    torch.manual_seed(3)
    with torch._inductor.config.patch(fallback_random=True):
        out = compiled(q, k, v)
    torch.manual_seed(3)
    want = _sdpa_causal_dropped(q, k, v)
    torch.testing.assert_close(out, want)
    assert not torch.allclose(want, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    do = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), do)
    ref = torch.autograd.grad(want, (q, k, v), do)
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r)


@pytest.mark.gpu
def test_gpu_small_sdpa_calls_with_dropout_are_kept_on_the_gpu(monkeypatch):
    """On a CUDA device, where the rule was measured (no CPU added to its devices): a causal
    SDPA call with dropout of 3.2 GFLOP (HF Llama at 8 x 512) is kept, one of 19.3 replaced."""
    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", ("cuda",))

    def cuda(b):
        return [t.cuda().bfloat16().detach().requires_grad_() for t in _inputs(b, 12, 512, 64)[:3]]

    site = _site(_sdpa_causal_dropped, *cuda(8))
    assert site.device == "cuda" and not site.replaced, site
    assert "causal call with dropout of 3.2 GFLOP" in site.reason, site.reason
    assert _site(_sdpa_causal_dropped, *cuda(48)).replaced
