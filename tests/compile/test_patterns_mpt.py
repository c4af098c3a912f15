"""HF MPT (built from a config, no download): its attention adds an ALiBi bias built for
max_seq_len, `slopes * arange(1 - L, 1)`, sliced to the last keys (slope * j plus a per-row
constant), then masked_fill's HF's causal mask. The pattern pass proves both for every length
the graph accepts and hands the op causal=True and the slopes; the compiled model's output and
gradients equal eager's, at static and dynamic lengths.
"""

from __future__ import annotations

import pytest
import torch
from model_checks import lengths_match_eager, params_match_eager, slopes_seen, token_ids

import flashgen
from flashgen.compile.backend import backend

transformers = pytest.importorskip("transformers")


def _mpt(max_seq_len: int = 64):
    torch.manual_seed(0)
    cfg = transformers.MptConfig(
        d_model=64, n_heads=4, n_layers=2, vocab_size=100, max_seq_len=max_seq_len
    )
    return transformers.MptForCausalLM(cfg).eval()


def test_mpt_site_replaced_as_causal_alibi():
    report = flashgen.explain(_mpt(), token_ids(19))
    assert report.found == 2, str(report)
    for site in report.sites:
        assert site.replaced and site.causal is True and site.alibi and not site.mask, site


@pytest.mark.parametrize("dynamic", [False, True])
def test_mpt_matches_eager(monkeypatch, dynamic):
    """Forward and gradients, and the kernels got one slope per head. With `dynamic`, the
    second length recompiles with symbolic lengths (Dynamo's automatic dynamic: MPT's slice
    starts become max(0, 64 - L)) and a third reuses that graph: the proofs hold for every
    length it accepts. (dynamic=True would also make MPT's float softmax_scale a graph input,
    which the pass refuses as a scale.)"""
    seen = slopes_seen(monkeypatch)
    model = _mpt()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    lengths_match_eager(model, compiled, seen, (19, 33, 27) if dynamic else (19,))
    assert all(tuple(s.shape) == (4,) for s in seen)


def _padding_mask(t: int, side: str):
    """Batch entry 1 padded by 7 tokens on `side` (left padding with the causal mask hides
    whole query rows: eager gives them the uniform softmax of equal finfo.min scores)."""
    mask = torch.ones(2, t, dtype=torch.long)
    if side == "right":
        mask[1, t - 7 :] = 0
    else:
        mask[1, :7] = 0
    return mask


@pytest.mark.parametrize("side", ["right", "left"])
def test_padded_mpt_replaced_with_mask_tensor_and_alibi(monkeypatch, side):
    """A padded batch: HF's boolean mask (causal and key padding, from the attention_mask
    input) is read by the kernels as a tensor beside the proven ALiBi; logits and every
    parameter gradient equal eager's, the fully masked rows of left padding included."""
    ids, mask = token_ids(19), _padding_mask(19, side)
    model = _mpt()
    report = flashgen.explain(model, ids, attention_mask=mask)
    assert (report.found, report.replaced) == (2, 2), str(report)
    for site in report.sites:
        assert site.causal is False and site.alibi and site.mask == "bool", site
    seen = slopes_seen(monkeypatch)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    params_match_eager(model, compiled, input_ids=ids, attention_mask=mask)
    assert seen and all(tuple(s.shape) == (4,) for s in seen)  # the kernels ran with ALiBi


@pytest.mark.parametrize("padded", [False, True], ids=["full", "leftpad"])
def test_mpt_kv_cache_decoding_steps_replaced(padded):
    """A prefill with a KV cache and three decoding steps (the second recompiles with symbolic
    lengths, the third reuses that graph): every graph's sites are replaced, the steps running
    the decode kernels with ALiBi beside HF's boolean mask, and every step's logits equal
    eager's. In the symbolic graph MPT's bias, built for max_seq_len and sliced to the last
    keys, is 64 - Max(0, 63 - s) long beside s + 1 keys: equal for every length the model
    takes, guarded so (`flashgen.compile.patterns.core.same_length`), not provable from the
    sizes alone."""
    from flashgen.compile.patterns import counters
    from flashgen.kernels import decode

    model = _mpt()
    ids = token_ids(9)
    mask = torch.ones(2, 9, dtype=torch.long)
    if padded:
        mask[1, :3] = 0
    calls = []
    real = decode.decode_forward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("alibi") is not None and kwargs.get("mask") is not None)
        return real(*args, **kwargs)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend=backend(fallback="eager"))
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(decode, "decode_forward", spy)
        want = model(input_ids=ids, attention_mask=mask, use_cache=True)
        got = compiled(input_ids=ids, attention_mask=mask, use_cache=True)
        torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
        for _ in range(3):
            step = want.logits[:, -1].argmax(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            kw = {"attention_mask": mask, "use_cache": True}
            want = model(input_ids=step, past_key_values=want.past_key_values, **kw)
            got = compiled(input_ids=step, past_key_values=got.past_key_values, **kw)
            torch.testing.assert_close(got.logits, want.logits, atol=2e-5, rtol=1e-4)
    assert counters["matmul.skipped"] == 0 and counters["matmul.replaced"] == 6, dict(counters)
    # 3 steps x 2 layers on the decode kernels (more calls where compiling ran a graph too)
    assert len(calls) >= 6 and all(calls), calls
