"""Checks shared by the model tests of the compile pass: a compiled model or attention
function against eager, and what the kernels were handed (imported like `attention_blocks`:
`tests/` is on the path)."""

from __future__ import annotations

import torch


def tiny_llama(vocab: int = 64):
    """A two-layer HF Llama in training mode with SDPA attention (2 query heads of 16, 1 key/value
    head), seeded weights from a config, no download."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).train()
    model.config._attn_implementation = "sdpa"
    return model


def tiny_modernbert(attn: str = "sdpa"):
    """A two-layer HF ModernBERT (a local layer with a 4-key window, then a global one; 2 heads
    of 16), seeded weights from a config, no dropout; and a padded batch for it (3 x 13 ids, one
    entry right-padded, one left-padded) as (model, input_ids, attention_mask)."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.ModernBertConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, global_attn_every_n_layers=2, local_attention=4,
        max_position_embeddings=64, pad_token_id=0, attn_implementation=attn,
        reference_compile=False, embedding_dropout=0.0, mlp_dropout=0.0, attention_dropout=0.0,
    )  # fmt: skip
    model = transformers.ModernBertModel(cfg)
    ids = torch.randint(1, 64, (3, 13), generator=torch.Generator().manual_seed(6))
    mask = torch.ones(3, 13, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, :4] = 0
    return model, ids, mask


def recording_op(calls: list, record):
    """flashgen's op, appending `record(q, causal, args, kwargs)` to `calls` at every call on
    real tensors (compiling runs the graph once on fake ones): what the kernels were handed, at
    run time, for a backend built with `flashgen.backend(op=..., fallback="eager")` (the eager
    fallback runs the rewritten graph as Python; AOTAutograd would trace through it). `args`:
    the op's positional arguments after `causal` (scale, window, softcap, causal_align,
    deterministic, seq_bounds, attn_mask; trailing defaults left out)."""
    from torch._subclasses.fake_tensor import is_fake

    import flashgen.ops  # noqa: F401 - registers torch.ops.flashgen

    real = torch.ops.flashgen.attention.default

    def op(q, k, v, causal, *args, **kwargs):
        if not is_fake(q):
            calls.append(record(q, causal, args, kwargs))
        return real(q, k, v, causal, *args, **kwargs)

    return op


def token_ids(t: int, seed: int = 1, vocab: int = 100, batch: int = 2) -> torch.Tensor:
    """A [batch, t] batch of random token ids (a seeded generator: the same ids every call)."""
    return torch.randint(0, vocab, (batch, t), generator=torch.Generator().manual_seed(seed))


def params_match_eager(model, compiled, **inputs) -> None:
    """Logits and every parameter gradient of `compiled(**inputs)` equal the eager model's
    (a scalar loss of the logits, each run from zeroed gradients)."""
    model.zero_grad()
    want = model(**inputs).logits
    want.square().mean().backward()
    want_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    got = compiled(**inputs).logits
    got.square().mean().backward()
    assert torch.isfinite(want).all()
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert want_grads
    for name, g in want_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, g, atol=1e-4, rtol=1e-3,
                                   msg=name)  # fmt: skip


def inputs_match_eager(fn, compiled, q, k, v, *extra, grad_tol=(5e-5, 1e-4)) -> None:
    """`compiled(q, k, v, *extra)` equals `fn(...)`, and so do the gradients of q, k and v
    (`grad_tol`: atol, rtol) of a scalar loss of the output."""
    got = compiled(q, k, v, *extra)
    got_grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    want = fn(q, k, v, *extra)
    want_grads = torch.autograd.grad(want.square().sum(), (q, k, v))
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    atol, rtol = grad_tol
    for name, g, w in zip(("dq", "dk", "dv"), got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, msg=name)


def slopes_seen(monkeypatch) -> list:
    """The ALiBi slopes the kernels are handed at run time from now on (appended per call)."""
    from flashgen.runtime import primitives

    seen: list = []
    checked = primitives.check_slopes
    monkeypatch.setattr(primitives, "check_slopes", lambda s, q: seen.append(s) or checked(s, q))
    return seen


def lengths_match_eager(model, compiled, seen: list, lengths) -> None:
    """`params_match_eager` at each token length in turn, every call running the kernels with
    ALiBi (`seen` from `slopes_seen` grows); from the third length on a recompile is an error:
    a graph made dynamic by the second length must serve every later one."""
    for i, t in enumerate(lengths):
        before = len(seen)
        with torch._dynamo.config.patch(error_on_recompile=i >= 2):
            params_match_eager(model, compiled, input_ids=token_ids(t, seed=t))
        assert len(seen) > before  # this call ran the kernels with ALiBi
