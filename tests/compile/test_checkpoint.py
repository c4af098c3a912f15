"""Attention inside activation checkpointing (`torch.utils.checkpoint.checkpoint(fn, x,
use_reentrant=False)`, what a training loop that checkpoints every block writes): Dynamo
traces the checkpointed call as the higher-order op `tag_activation_checkpoint(body, ...)`
with the attention in `body`, a submodule of the graph the backend gets. The pass rewrites
the body in place (`patterns.passes._checkpoint_bodies`): the sites are replaced, the op runs
(recorded at run time) with the causal flag proven inside the body, for an SDPA `is_causal`
call and for a hand-written softmax whose mask is a `tril` buffer (module state, proven from
its real value as outside a body); output and gradients equal eager's, static and dynamic
shapes, through AOTAutograd's recompute and through Inductor; dropout recomputes the mask it
drew. A mask built before the checkpointed blocks (HF's layout, HF's own gradient checkpointing
included) is proven inside them once its computation is copied in (`patterns.checkpoint`)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from model_checks import recording_op  # (tests/ is on the path)
from torch.utils.checkpoint import checkpoint

import flashgen


class _Block(torch.nn.Module):
    def __init__(
        self, width: int, heads: int, hand_written: bool, max_len: int = 32, reentrant=False
    ):
        super().__init__()
        self.heads, self.hand_written, self.reentrant = heads, hand_written, reentrant
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.register_buffer("tril", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))  # fmt: skip

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        if self.hand_written:  # nanoGPT's attention without flash
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.tril[:, :, :t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x):
        return x + checkpoint(self.attend, x, use_reentrant=self.reentrant)


def _model(hand_written: bool, reentrant: bool = False):
    torch.manual_seed(0)
    blocks = (_Block(32, 2, hand_written, reentrant=reentrant) for _ in range(2))
    return torch.nn.Sequential(*blocks)


def _compiled(model, dynamic, op, fallback):
    """`model` compiled with the backend; `op` (recording) only with the eager fallback, which
    runs the rewritten graph as Python (AOTAutograd would trace through a Python op)."""
    torch._dynamo.reset()
    op = op if fallback == "eager" else None
    return torch.compile(model, dynamic=dynamic, backend=flashgen.backend(op=op, fallback=fallback))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("hand_written", [False, True], ids=["sdpa", "hand_written"])
def test_checkpointed_attention_is_replaced_and_matches_eager(hand_written, dynamic):
    """The op runs in the forward and again in the backward's recompute (recorded at run time:
    the rewritten graph run as Python, `fallback="eager"`), with the causal flag and no mask
    tensor; then the same graph through AOTAutograd (`aot_eager`): output and gradients."""
    model = _model(hand_written)
    report = flashgen.explain(model, torch.randn(2, 9, 32))
    assert len(report.sites) == 2 and all(s.replaced and s.causal for s in report.sites), report
    calls: list = []
    # (args[6]: attn_mask, when given)
    op = recording_op(calls, lambda q, causal, args, _: (tuple(q.shape), causal, args[6:7]))
    for fallback in ("eager", "aot_eager"):
        compiled = _compiled(model, dynamic, op, fallback)
        for t in (9, 13):
            x = torch.randn(2, t, 32, requires_grad=True)
            params = [x, *model.parameters()]
            want = model(x)
            want_grads = torch.autograd.grad(want.square().sum(), params)
            calls.clear()
            got = compiled(x)
            got_grads = torch.autograd.grad(got.square().sum(), params)
            if fallback == "eager":  # two blocks, each forward and recomputed in the backward
                assert calls == [((2, 2, t, 16), True, ())] * 4, calls
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
            for g, w in zip(got_grads, want_grads, strict=True):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_reentrant_checkpoint_is_replaced_and_matches_eager():
    """`use_reentrant=True` (PyTorch's older default; it refuses `autograd.grad`, so gradients
    through `.backward()`): the sites are replaced as well, output and gradients equal eager's."""
    model = _model(hand_written=False, reentrant=True)
    x = torch.randn(2, 11, 32, requires_grad=True)
    report = flashgen.explain(model, x)
    assert len(report.sites) == 2 and all(s.replaced and s.causal for s in report.sites), report

    def run(fn):
        out = fn(x)
        out.square().sum().backward()
        grads = [t.grad.clone() for t in (x, *model.parameters())]
        x.grad = None
        model.zero_grad(set_to_none=True)
        return out.detach(), grads

    want, want_grads = run(model)
    got, got_grads = run(_compiled(model, False, None, "aot_eager"))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_checkpointed_attention_through_inductor():
    """The default fallback (Inductor) compiles the rewritten body (both sites replaced):
    output and gradients."""
    from flashgen.compile.patterns.core import counters

    model = _model(hand_written=False)
    x = torch.randn(2, 11, 32, requires_grad=True)
    params = [x, *model.parameters()]
    want = model(x)
    want_grads = torch.autograd.grad(want.square().sum(), params)
    torch._dynamo.reset()
    before = counters["sdpa.replaced"]
    got = torch.compile(model, backend="flashgen")(x)
    assert counters["sdpa.replaced"] - before == 2
    got_grads = torch.autograd.grad(got.square().sum(), params)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


class _DropoutBlock(torch.nn.Module):
    def __init__(self, checkpointed: bool):
        super().__init__()
        self.checkpointed = checkpointed
        self.qkv = torch.nn.Linear(32, 96)

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.3)
        return y.transpose(1, 2).reshape(b, t, c)

    def forward(self, x):
        return x + (checkpoint(self.attend, x, use_reentrant=False) if self.checkpointed else self.attend(x))  # fmt: skip


def test_checkpointed_dropout_recomputes_the_same_mask():
    """Attention dropout inside a checkpointed block: the backward's recompute must drop what
    the forward dropped. The kernels draw from a seed that is an op of the graph (PyTorch's
    generator), which AOTAutograd does not draw again for the recompute: output and gradients
    equal those of the same blocks without checkpointing, under the same `manual_seed`, and the
    site is replaced with its dropout. (Dynamo's `eager` backend, which skips AOTAutograd, draws
    again for PyTorch's own SDPA as well; not a fallback to train with.)"""
    x = torch.randn(2, 9, 32, requires_grad=True)
    runs = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(_DropoutBlock(checkpointed) for _ in range(2)))
        report = flashgen.explain(model, x)
        assert len(report.sites) == 2, report
        assert all(s.replaced and s.dropout == 0.3 for s in report.sites), report
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=flashgen.backend(fallback="aot_eager"))
        torch.manual_seed(1)
        out = compiled(x)
        runs.append((out, torch.autograd.grad(out.square().sum(), [x, *model.parameters()])))
    (out, grads), (out_ac, grads_ac) = runs
    torch.testing.assert_close(out_ac, out, atol=0, rtol=0)
    for g, w in zip(grads_ac, grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-5)


class _MaskOutside(torch.nn.Module):
    """Blocks checkpointed one by one, the mask built once in the model's forward and handed to
    each (HF's layout): from a `tril` buffer (provable) or from a forward() input (not)."""

    def __init__(self, from_input: bool, random_keys: bool = False):
        super().__init__()
        self.from_input, self.random_keys = from_input, random_keys
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(32, 96) for _ in range(2))
        self.register_buffer("tril", torch.tril(torch.ones(32, 32, dtype=torch.bool)))

    def attend(self, x, mask, qkv):
        b, t, c = x.shape
        q, k, v = qkv(x).view(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return x + y.transpose(1, 2).reshape(b, t, c)

    def forward(self, x, keep):
        t = x.shape[1]
        mask = keep[:, None, :, None] & keep[:, None, None, :] if self.from_input else None
        if mask is None:
            if self.random_keys:  # a per-key mask drawn here: never drawn again in a body
                keep = keep & (torch.rand(x.shape[0], t) > 0.3)
            mask = self.tril[:t, :t][None, None] & keep[:, None, None, :]
        for qkv in self.qkv:
            x = checkpoint(self.attend, x, mask, qkv, use_reentrant=False)
        return x


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_mask_built_outside_the_checkpoint_is_proven_inside(dynamic):
    """A causal-and-padding mask built before the checkpointed blocks reaches each body as a
    placeholder; its computation is copied into the bodies, so the kernels take the causal flag
    and the padding per key (recorded at run time) instead of the [B, 1, N, N] tensor. A mask
    that cannot be proven (here from a forward() input alone) is left an operand, read whole.
    Output and gradients equal eager's either way, and through AOTAutograd (the parent graph
    recompiled with the bodies' new operands)."""
    calls: list = []
    op = recording_op(calls, lambda q, causal, args, _: (causal, tuple(args[6].shape)))
    for from_input, fallback in ((False, "eager"), (True, "eager"), (False, "aot_eager")):
        torch.manual_seed(0)
        model = _MaskOutside(from_input)
        compiled = _compiled(model, dynamic, op, fallback)
        for t in (9, 12):
            x = torch.randn(2, t, 32, requires_grad=True)
            keep = torch.ones(2, t, dtype=torch.bool)
            keep[1, t - 3 :] = False
            params = [x, *model.parameters()]
            want = model(x, keep)
            loss_weight = keep[..., None]  # (padded rows: eager's NaN-free choice is its own)
            want_grads = torch.autograd.grad((want * loss_weight).square().sum(), params)
            calls.clear()
            got = compiled(x, keep)
            got_grads = torch.autograd.grad((got * loss_weight).square().sum(), params)
            expected = (False, (2, 1, t, t)) if from_input else (True, (2, 1, 1, t))
            if fallback == "eager":
                assert calls == [expected] * 4, (from_input, calls)
            torch.testing.assert_close(got * loss_weight, want * loss_weight, atol=2e-5, rtol=1e-4)
            for g, w in zip(got_grads, want_grads, strict=True):
                torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("padded", [True, False], ids=["left_padded", "no_mask"])
def test_hf_llama_with_gradient_checkpointing(padded):
    """HF's own `gradient_checkpointing_enable` on a Llama batch: every layer's attention is
    replaced inside its checkpoint, causal, with a left-padded batch's padding per key; without
    an attention_mask (HF's training call: the mask from its own position ids, see
    test_hf_position_masks) causal alone. HF builds the mask once, outside the layers; it is
    copied into the bodies. Logits and every gradient equal eager's. (HF's hub kernels layer
    sets a context variable in the attention's forward, a side effect Dynamo refuses under a
    checkpoint unless told to skip it in the backward's replay.)"""
    pytest.importorskip("transformers")
    from model_checks import tiny_llama

    model = tiny_llama()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(1, 64, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0
    kw = {"input_ids": ids, "attention_mask": mask} if padded else {"input_ids": ids}
    valid = mask.bool()[..., None] if padded else torch.ones(2, 11, 1, dtype=torch.bool)
    _hf_matches_eager(model, kw, valid, lambda s: s.key_mask if padded else not s.mask)


def _hf_matches_eager(model, kw, valid, site_ok) -> None:
    """An HF causal LM under its own gradient checkpointing, called with `kw`: two sites, each
    replaced, causal and `site_ok(site)`; the logits at the `valid` positions and every
    parameter's gradient equal eager's."""
    params = list(model.parameters())
    want = model(**kw).logits
    want_grads = torch.autograd.grad((want * valid).square().sum(), params, allow_unused=True)
    with torch._dynamo.config.patch(skip_fwd_side_effects_in_bwd_under_checkpoint=True):
        report = flashgen.explain(model, **kw)
        assert len(report.sites) == 2, report
        assert all(s.replaced and s.causal and site_ok(s) for s in report.sites), report
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=flashgen.backend(fallback="aot_eager"))
        got = compiled(**kw).logits
        got_grads = torch.autograd.grad((got * valid).square().sum(), params, allow_unused=True)
    torch.testing.assert_close(got * valid, want * valid, atol=2e-5, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_a_report_only_pass_leaves_the_graphs_as_they_were():
    """`attention_pass(rewrite_graph=False)` (explain, the sweeps' reports) tries the copied
    mask and undoes it: the parent's and the bodies' code are unchanged (and no body keeps the
    Dynamo records lent to its placeholders), and the report says what the rewrite would do
    (causal, the padding per key)."""
    from flashgen.compile.patterns import attention_pass

    seen = []

    def capture(gm, example_inputs):
        codes = [gm.code, *(m.code for m in gm.children())]
        sites = attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
        seen.append((codes, [gm.code, *(m.code for m in gm.children())], sites))
        # (the records of where operands came from, lent to the bodies for the proof, are back)
        assert not any("grapharg" in n.meta for m in gm.children() for n in m.graph.nodes)
        return gm.forward

    torch.manual_seed(0)
    model = _MaskOutside(from_input=False)
    keep = torch.ones(2, 9, dtype=torch.bool)
    torch._dynamo.reset()
    torch.compile(model, backend=capture)(torch.randn(2, 9, 32), keep)
    ((before, after, sites),) = seen
    assert len(before) == 3 and before == after
    assert len(sites) == 2 and all(s.causal and s.key_mask for s in sites), sites


def test_a_random_mask_is_not_copied_into_the_bodies():
    """`tril & (keep & rand > 0.3)`, drawn once before the checkpointed blocks: a copy in each
    body would draw again there and in the backward's recompute, so it stays an operand, read
    whole (two rules refuse the copy: FX counts a random op impure, and no op outside
    `checkpoint.COPYABLE` is copied); with the same seed the compiled model equals eager."""
    torch.manual_seed(0)
    model = _MaskOutside(from_input=False, random_keys=True)
    x = torch.randn(2, 9, 32, requires_grad=True)
    keep = torch.ones(2, 9, dtype=torch.bool)
    report = flashgen.explain(model, x, keep)
    assert len(report.sites) == 2, report
    assert all(s.replaced and not s.causal and s.mask == "bool" for s in report.sites), report
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=flashgen.backend(fallback="eager"))
    torch.manual_seed(5)
    want = model(x, keep)
    torch.manual_seed(5)
    got = compiled(x, keep)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("padded", [True, False], ids=["left_padded", "no_mask"])
def test_hf_bloom_with_gradient_checkpointing(padded):
    """BLOOM builds its ALiBi bias outside the layers too (from the attention_mask's cumsum, or
    an arange without one) and hands it to each checkpointed layer, where it reaches the scores
    as baddbmm's input, not through a product: the bias's computation is copied into the
    bodies like a mask's, where it is proven ALiBi (no mask) or read per key beside the padding
    (see test_patterns_bloom), so every site is replaced, causal. Logits and every gradient
    equal eager's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BloomConfig(hidden_size=64, n_head=4, n_layer=2, vocab_size=64)
    model = transformers.BloomForCausalLM(cfg).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ids = torch.randint(1, 64, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0
    kw = {"input_ids": ids, "use_cache": False}
    if padded:
        kw["attention_mask"] = mask
    valid = mask.bool()[..., None] if padded else torch.ones(2, 11, 1, dtype=torch.bool)
    _hf_matches_eager(model, kw, valid, lambda s: s.mask if padded else s.alibi)


def test_hf_t5_with_gradient_checkpointing():
    """HF T5 (eager attention) under its own gradient checkpointing, a left-padded batch: T5
    sets `position_bias.requires_grad = True` there, a graph break, and the layers compiled
    after it get the relative bias and the additive padding mask as two inputs added to the
    scores one after the other, read as their sum (`mask_reading._two_biases`). Every site found
    is replaced; logits and every gradient equal eager's."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=64,
        relative_attention_num_buckets=8, dropout_rate=0.0, decoder_start_token_id=0,
    )  # fmt: skip
    model = transformers.T5ForConditionalGeneration._from_config(cfg, attn_implementation="eager")
    model.train().gradient_checkpointing_enable({"use_reentrant": False})
    ids = torch.randint(1, 64, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0
    kw = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :9]}
    params = list(model.parameters())
    want = model(**kw).logits
    want_grads = torch.autograd.grad(want.square().sum(), params, allow_unused=True)
    report = flashgen.explain(model, **kw)
    assert report.found >= 4 and report.replaced == report.found, report
    assert any(s.mask == "add" for s in report.sites), report
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=flashgen.backend(fallback="aot_eager"))
    got = compiled(**kw).logits
    got_grads = torch.autograd.grad(got.square().sum(), params, allow_unused=True)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        if w is None:
            assert g is None or not g.any()
        else:
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
