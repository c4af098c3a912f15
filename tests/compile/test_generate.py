"""HF transformers `generate()` with the model's forward under torch.compile(backend="flashgen").

A tiny random-weight Llama (no download), greedy decoding with the default dynamic cache and
with `cache_implementation="static"`: the same tokens as eager, and a bounded number of graphs
(prefill, first step, and for the dynamic cache one dynamic-length recompile), not one per
generated token. The GPU test does the same on CUDA in bf16 with a longer generation.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import flashgen  # noqa: E402

# Graphs a generation may compile: prefill, the first decoding step, and (dynamic cache: the
# key length changes every token) one recompile with a dynamic length.
MAX_GRAPHS = {"dynamic": 3, "static": 2}


def tiny_llama(attn: str, device: str = "cpu", dtype=torch.float32):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        attn_implementation=attn,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(cfg).eval().to(device=device, dtype=dtype)


def generate_both(model, ids, cache: str, new_tokens: int):
    """(eager tokens, compiled tokens, graphs compiled)."""
    kw = {"max_new_tokens": new_tokens, "do_sample": False, "pad_token_id": 0}
    if cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        eager = model.generate(ids, **kw)
    torch._dynamo.reset()
    graphs = []
    inner = flashgen.backend()

    def counting(gm, example_inputs):
        graphs.append(gm)
        return inner(gm, example_inputs)

    model.generation_config.disable_compile = True  # our compile, not generate()'s own
    model.forward = torch.compile(model.forward, backend=counting)
    with torch.no_grad():
        compiled = model.generate(ids, **kw)
    return eager, compiled, len(graphs)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_compiled_matches_eager(cache, monkeypatch):
    """Every decoding step's attention runs flashgen's split-KV decode kernels with HF's mask
    (its causal part and generate()'s padding mask, read as a tensor: exact whatever it holds),
    and the tokens are eager's, with a left-padded batch too."""
    from flashgen.kernels import decode

    steps = []
    real = decode.decode_forward

    def spy(q, k, v, **kw):
        steps.append((q.shape[2], kw.get("mask") is not None))
        return real(q, k, v, **kw)

    monkeypatch.setattr(decode, "decode_forward", spy)
    model = tiny_llama("sdpa")
    ids = torch.randint(1, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    ids[1, :3] = 0  # left padding (pad_token_id 0): generate() passes a padding mask
    eager, compiled, graphs = generate_both(model, ids, cache, new_tokens=6)
    assert torch.equal(eager, compiled)
    assert graphs <= MAX_GRAPHS[cache]
    # The prefill (7 rows: short enough for the decode kernels too), then 5 decoding steps
    # (the prefill gives the 1st token), 2 layers each, every one with HF's mask.
    assert steps == [(7, True)] * 2 + [(1, True)] * 10, steps


@pytest.mark.gpu
@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_generate_compiled_matches_eager_gpu(cache, attn):
    model = tiny_llama(attn, "cuda", torch.bfloat16)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1)).cuda()
    eager, compiled, graphs = generate_both(model, ids, cache, new_tokens=24)
    # bf16 greedy decoding: kernels that round differently may flip a near-tie; the first
    # tokens must agree, and most of the rest.
    same = (eager == compiled).float().mean().item()
    assert torch.equal(eager[:, :16], compiled[:, :16]) and same > 0.9, same
    assert graphs <= MAX_GRAPHS[cache]
