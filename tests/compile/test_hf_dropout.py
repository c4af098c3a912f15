"""HF models trained with attention dropout, compiled with the flashgen backend, against eager HF
given the same keep masks: forward and every parameter's gradient.

The pattern tests (`test_patterns_dropout.py`) recover the mask of one site from its output; a
model has several sites between layers of other work, so here the masks are replayed instead:
every seed the compiled model's kernels are handed at run time is recorded
(`flashgen.kernels.dropout.launch_args`), and the eager reference (HF's eager attention, a copy
of the same weights) runs with `torch.nn.functional.dropout` on 4-d attention weights replaced
by the kernels' keep mask for the next recorded seed (`flashgen.kernels.dropout.keep_mask`),
scaled by 1 / (1 - p) as the kernels scale. Every other dropout of the configs is 0. A site the
backend did not replace would draw no seed (the count is checked) and, replayed or not, the
masks would differ. On the CPU the size rules that keep small dropout sites PyTorch's do not
apply (`choice.MASKED_RULE_DEVICES`), so every site runs flashgen's kernels.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from flashgen.compile.backend import backend
from flashgen.kernels import dropout

transformers = pytest.importorskip("transformers")

P = 0.2
LAYERS = 2


def _config(family: str, attn: str):
    common = {"vocab_size": 96, "attn_implementation": attn}
    if family == "llama":  # causal, GQA 2
        return transformers.LlamaConfig(
            hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            attention_dropout=P, **common,
        )  # fmt: skip
    if family == "bert":  # not causal; padding read from attention_mask
        return transformers.BertConfig(
            hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS,
            num_attention_heads=4, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=P, **common,
        )  # fmt: skip
    return transformers.GPT2Config(  # causal, fused QKV
        n_embd=64, n_layer=LAYERS, n_head=4, n_positions=64, attn_pdrop=P, resid_pdrop=0.0,
        embd_pdrop=0.0, **common,
    )  # fmt: skip


def _models(family: str, attn: str):
    """(the model to compile, with `attn` attention; the eager reference: the same weights with
    HF's eager attention), both in training mode."""
    auto = {"llama": transformers.LlamaForCausalLM, "bert": transformers.BertModel,
            "gpt2": transformers.GPT2LMHeadModel}[family]  # fmt: skip
    torch.manual_seed(0)
    model = auto(_config(family, attn)).train()
    ref = auto(_config(family, "eager")).train()
    ref.load_state_dict(copy.deepcopy(model.state_dict()))
    return model, ref


def _recorded_seeds(monkeypatch) -> list[int]:
    """The seeds the kernels are handed from now on (forward and backward alike, in order)."""
    seen: list[int] = []
    real = dropout.launch_args

    def record(p, seed):
        got = real(p, seed)
        if got is not None:
            seen.append(got[1])
        return got

    monkeypatch.setattr(dropout, "launch_args", record)
    return seen


def _replaying(monkeypatch, seeds: list[int]):
    """F.dropout on 4-d attention weights applies the kernels' keep mask of the next seed."""
    it = iter(seeds)
    real = F.dropout

    def drop(x, p=0.5, training=True, inplace=False):
        if not training or p == 0.0 or x.dim() != 4:
            return real(x, p, training, inplace)
        b, h, sq, sk = x.shape
        keep = dropout.keep_mask(next(it), p, b, h, sq, sk, x.device)
        return x * keep / (1.0 - p)

    monkeypatch.setattr(F, "dropout", drop)
    return it


def _output(family, out):
    return out.last_hidden_state if family == "bert" else out.logits


@pytest.mark.parametrize(
    ("family", "attn"),
    [
        ("llama", "sdpa"),
        ("llama", "eager"),
        ("bert", "sdpa"),
        ("bert", "eager"),
        ("gpt2", "sdpa"),
    ],  # fmt: skip
)
def test_training_with_attention_dropout_matches_eager_with_the_same_masks(
    family, attn, monkeypatch
):
    model, ref = _models(family, attn)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(1, 96, (2, 11), generator=gen)
    kw = {}
    if family == "bert":  # right padding: the kernels number keys from 0 either way
        mask = torch.ones(2, 11, dtype=torch.long)
        mask[1, 8:] = 0
        kw["attention_mask"] = mask
    width = 64 if family == "bert" else 96  # hidden size / vocabulary
    weights = torch.randn(2, 11, width, generator=gen)

    def loss(out):  # (a random projection: a layer-normed state's mean square is constant)
        return (_output(family, out) * weights).sum()

    seeds = _recorded_seeds(monkeypatch)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend(fallback="aot_eager"))
    torch.manual_seed(7)
    got = compiled(input_ids=ids, **kw)
    drawn = list(seeds)
    assert len(drawn) == LAYERS and len(set(drawn)) == LAYERS, drawn  # each site, its own seed
    loss(got).backward()
    assert seeds[LAYERS:] and set(seeds[LAYERS:]) == set(drawn)  # the backward's: the same

    left = _replaying(monkeypatch, drawn)
    want = ref(input_ids=ids, **kw)
    assert next(left, None) is None  # every site of the reference took one mask
    loss(want).backward()
    torch.testing.assert_close(_output(family, got), _output(family, want), atol=5e-5, rtol=1e-4)
    grads = 0
    for name, p in ref.named_parameters():
        if p.grad is None:
            continue
        grads += 1
        torch.testing.assert_close(
            model.get_parameter(name).grad, p.grad, atol=1e-4, rtol=1e-3, msg=name
        )
    assert grads > 4 * LAYERS

    # torch.manual_seed reproduces the compiled run; another seed drops other entries
    monkeypatch.undo()
    torch.manual_seed(7)
    again = _output(family, compiled(input_ids=ids, **kw))
    torch.testing.assert_close(again, _output(family, got), atol=0, rtol=0)
    torch.manual_seed(8)
    assert not torch.allclose(_output(family, compiled(input_ids=ids, **kw)), again)
