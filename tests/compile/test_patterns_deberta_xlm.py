"""HF DeBERTa-v2/v3 and XLM (built from configs, no download) and their spellings by hand.

DeBERTa computes its scale as a 0-d tensor, `torch.sqrt(torch.tensor(head_dim, dtype=float) *
factor)`, and divides the keys by it (`folded_number`: a number known when compiling, as
eager's division uses it); its scores are a bmm over [batch x heads]-flattened q and k, viewed
back as [B, H, Sq, Sk] before HF's mask, the outer product of the padding with itself, is
applied with finfo.min (a mask applied after that view is a 4-D mask as any other; one applied
to the flattened scores is still refused); with relative attention (v3) its c2p/p2c bias,
computed from q, k and the relative embeddings, is added to the flattened scores. Without
padding its mask is built from `torch.ones` through a squeeze, proven to hide nothing.

XLM fills its scores in place with `(mask == 0).view(B, 1, 1, T).expand_as(scores)` and casts
the float32 softmax back with `.type_as(scores)`: two reads of the scores' shape and dtype
alone, which the walk does not count as uses, and the op is handed the mask before its
expand_as (it broadcasts it), so the scores are not computed for their shape.

Last, a learned bias that starts at zero (HF LeViT's table): a parameter's values are never
proven from, so it is read as the tensor it is, with its gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

import flashgen
from flashgen.compile.backend import backend

transformers = pytest.importorskip("transformers")


def _deberta(relative: bool, dropout: float = 0.0):
    torch.manual_seed(0)
    cfg = transformers.DebertaV2Config(
        hidden_size=32, num_attention_heads=2, num_hidden_layers=2, intermediate_size=64,
        vocab_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=dropout, relative_attention=relative,
        position_biased_input=not relative, pos_att_type=["p2c", "c2p"], position_buckets=8,
        norm_rel_ebd="layer_norm", max_relative_positions=-1,
    )  # fmt: skip
    return transformers.DebertaV2Model(cfg)


def _batch(length=11):
    ids = torch.randint(1, 64, (3, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, length, dtype=torch.long)
    mask[1, 7:] = 0  # right padding
    mask[2, :3] = 0  # left padding
    return ids, mask


def _compiled_and_eager(model, ids, mask, *, every_row: bool):
    """(compiled output, eager output, compiled gradients, eager gradients) of a loss over the
    valid positions of a padded batch (width 32); the outputs at the valid positions alone
    unless `every_row`."""
    valid = mask.bool()[..., None]
    weights = torch.randn(*ids.shape, 32, generator=torch.Generator().manual_seed(4)) * valid

    def run(m):
        model.zero_grad()
        out = m(input_ids=ids, attention_mask=mask).last_hidden_state
        (out * weights).sum().backward()
        out = out if every_row else out * valid
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want, want_grads = run(model)
    torch._dynamo.reset()
    got, grads = run(torch.compile(model, backend="flashgen"))
    return got, want, grads, want_grads


@pytest.mark.parametrize("relative", [True, False])
def test_deberta_padded_batch_replaced_and_matches_eager(relative):
    """Both layers replaced (scale 1/sqrt(3 d)); the output at every position equals eager's,
    the padded rows too (every key hidden: eager's uniform softmax over all keys), and the
    gradients of a loss over the valid positions equal eager's."""
    model = _deberta(relative)
    ids, mask = _batch()
    report = flashgen.explain(model, input_ids=ids, attention_mask=mask)
    assert report.found == 2 and all(s.replaced for s in report.sites), str(report)
    assert all(s.scale == pytest.approx(1 / math.sqrt(3 * 16)) for s in report.sites)
    # every position: the padded rows too (every key hidden: eager's uniform softmax)
    got, want, grads, want_grads = _compiled_and_eager(model, ids, mask, every_row=True)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    attention = [n for n in want_grads if n.endswith("query_proj.weight")]
    assert attention and all(want_grads[n].abs().max() > 1e-3 for n in attention)
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-4, rtol=1e-3, msg=name)


def test_deberta_unpadded_training_with_dropout_replaced():
    """HF's training call without an attention_mask: DeBERTa's mask of torch.ones (through a
    squeeze) is proven to hide nothing, so the sites take the kernels' dropout; with padding
    its rows hidden whole keep the sites (eager drops entries of their uniform row)."""
    model = _deberta(True, dropout=0.1).train()
    ids, mask = _batch()
    report = flashgen.explain(model, input_ids=ids)
    assert all(s.replaced and s.dropout == pytest.approx(0.1) for s in report.sites), str(report)
    report = flashgen.explain(model, input_ids=ids, attention_mask=mask)
    assert not any(s.replaced for s in report.sites)
    assert all("dropout on the rows it hides entirely" in s.reason for s in report.sites)


B, H, T, D = 2, 3, 9, 16


def _qkv():
    g = torch.Generator().manual_seed(2)
    return [torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3)]


def _padded(row: int, start: int) -> torch.Tensor:
    """A [B, T] keep mask (1 keeps) with `row` padded from `start` on."""
    keep = torch.ones(B, T, dtype=torch.long)
    keep[row, start:] = 0
    return keep


def _deberta_scale(q, k, v):
    scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * 3)
    s = q @ (k.transpose(-1, -2) / scale.to(dtype=q.dtype))
    return torch.softmax(s, dim=-1) @ v


def _tensor_scale(q, k, v, t):
    s = q @ (k.transpose(-1, -2) / torch.sqrt(t * 3))
    return torch.softmax(s, dim=-1) @ v


def _flat_masked(q, k, v, keep, after_view=True):
    """DeBERTa's layout: bmm over [B * H, T, D], the mask applied after the view back to
    [B, H, T, T] (or, `after_view` False, to the flattened scores)."""
    fq, fk, fv = (t.reshape(B * H, T, D) for t in (q, k, v))
    s = torch.bmm(fq, fk.transpose(-1, -2)) / math.sqrt(D)
    hide = ~keep.bool()[:, None, None, :]
    fill = torch.finfo(s.dtype).min
    if after_view:
        s = s.view(B, H, T, T).masked_fill(hide, fill)
    else:
        s = s.masked_fill(hide.expand(B, H, 1, T).reshape(B * H, 1, T), fill).view(B, H, T, T)
    p = torch.softmax(s, dim=-1).view(B * H, T, T)
    return torch.bmm(p, fv).view(B, H, T, D)


def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend(fallback="aot_eager"))(*args)


def test_a_scale_of_numbers_in_a_0d_tensor_is_folded():
    q, k, v = _qkv()
    report = flashgen.explain(_deberta_scale, q, k, v)
    assert [s.replaced for s in report.sites] == [True], str(report)
    assert report.sites[0].scale == pytest.approx(1 / math.sqrt(3 * D))
    torch.testing.assert_close(_compiled(_deberta_scale, q, k, v), _deberta_scale(q, k, v))
    # a 0-d tensor read from an input is not a number known when compiling
    t = torch.tensor(float(D))
    report = flashgen.explain(_tensor_scale, q, k, v, t)
    assert not report.sites[0].replaced and "0-d tensor" in report.sites[0].reason


def test_a_mask_applied_after_the_scores_are_viewed_back_is_read():
    q, k, v = _qkv()
    keep = _padded(row=1, start=5)
    report = flashgen.explain(_flat_masked, q, k, v, keep)
    assert [s.replaced for s in report.sites] == [True], str(report)
    got = _compiled(_flat_masked, q, k, v, keep)
    torch.testing.assert_close(got, _flat_masked(q, k, v, keep))
    gq = torch.autograd.grad(got.sum(), q)[0]
    torch.testing.assert_close(gq, torch.autograd.grad(_flat_masked(q, k, v, keep).sum(), q)[0])
    report = flashgen.explain(lambda *a: _flat_masked(*a, after_view=False), q, k, v, keep)
    assert not report.sites[0].replaced
    assert "flattened scores" in report.sites[0].reason


def _built_mask(q, k, v, ones):
    """DeBERTa's mask of no padding, `m[:, None, None, :] * m[:, None, None, :].squeeze(-2)
    .unsqueeze(-1)`, of torch.ones (hides nothing) or torch.zeros (hides every key)."""
    make = torch.ones if ones else torch.zeros
    m = make(q.shape[0], q.shape[2], dtype=torch.long)
    ext = m.unsqueeze(1).unsqueeze(2)
    mask = (ext * ext.squeeze(-2).unsqueeze(-1)).bool()
    s = (q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))).masked_fill(~mask, -3.0e38)
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize("ones", [True, False])
def test_a_squeezed_mask_of_ones_is_proven_and_of_zeros_is_not(ones):
    q, k, v = _qkv()
    report = flashgen.explain(_built_mask, q, k, v, ones)
    site = report.sites[0]
    if ones:
        assert site.replaced and site.mask == "" and site.causal is False, str(report)
    else:  # every key hidden: eager's uniform rows, never read as no mask
        assert not (site.replaced and site.mask == ""), str(report)
    torch.testing.assert_close(_compiled(_built_mask, q, k, v, ones), _built_mask(q, k, v, ones))


def test_xlm_padded_batch_replaced_and_matches_eager():
    torch.manual_seed(0)
    cfg = transformers.XLMConfig(vocab_size=64, emb_dim=32, n_layers=2, n_heads=2, dropout=0.0,
                                 attention_dropout=0.0)  # fmt: skip
    model = transformers.XLMModel(cfg)
    ids, mask = _batch()
    report = flashgen.explain(model, input_ids=ids, attention_mask=mask)
    assert report.found == 2 and all(s.replaced for s in report.sites), str(report)
    got, want, grads, want_grads = _compiled_and_eager(model, ids, mask, every_row=False)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert any(n.endswith("q_lin.weight") and g.abs().max() > 1e-3 for n, g in want_grads.items())
    for name, g in want_grads.items():
        torch.testing.assert_close(grads[name], g, atol=1e-4, rtol=1e-3, msg=name)


def _xlm_spelling(q, k, v, keep):
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.size(-1))
    hide = (keep == 0).view(B, 1, 1, -1).expand_as(scores)
    scores.masked_fill_(hide, torch.finfo(scores.dtype).min)
    return torch.matmul(torch.softmax(scores.float(), dim=-1).type_as(scores), v)


def test_shape_and_dtype_reads_of_the_scores_are_not_uses():
    q, k, v = _qkv()
    keep = _padded(row=0, start=6)
    report = flashgen.explain(_xlm_spelling, q, k, v, keep)
    assert [s.replaced for s in report.sites] == [True], str(report)
    rewritten = []

    def spy(gm, example_inputs):
        out = backend(fallback="aot_eager")(gm, example_inputs)
        rewritten.append(gm)
        return out

    torch._dynamo.reset()
    got = torch.compile(_xlm_spelling, backend=spy)(q, k, v, keep)
    torch.testing.assert_close(got, _xlm_spelling(q, k, v, keep))
    # neither product is left in the graph: the scores are not computed for their shape
    [gm] = rewritten
    assert not [n for n in gm.graph.nodes if n.target in (torch.matmul, "expand_as")]


class _ZeroInitBias(torch.nn.Module):
    """HF LeViT's spelling: a learned bias table, zero-initialised, indexed per pair and added
    after the scale. Its values at compile time (zeros) say nothing of the values training
    gives it: nothing may be proven from a parameter."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.zeros(H, 2 * T - 1))
        i = torch.arange(T)
        self.register_buffer("idx", (i[None, :] - i[:, None] + T - 1), persistent=False)

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * 0.25 + self.table[:, self.idx]
        return torch.softmax(s, dim=-1) @ v


def test_a_zero_initialised_learned_bias_is_read_as_a_tensor_with_its_gradient():
    model = _ZeroInitBias()
    q, k, v = _qkv()
    report = flashgen.explain(model, q, k, v)
    assert [(s.replaced, s.mask) for s in report.sites] == [(True, "add")], str(report)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    got = compiled(q, k, v)
    (g,) = torch.autograd.grad(got.square().sum(), (model.table,))
    (want,) = torch.autograd.grad(model(q, k, v).square().sum(), (model.table,))
    assert want.abs().max() > 1e-3
    torch.testing.assert_close(g, want, atol=5e-5, rtol=1e-4)
    with torch.no_grad():  # a training step's new values reach the compiled graph
        model.table.normal_(generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(compiled(q, k, v), model(q, k, v), atol=2e-5, rtol=1e-4)
