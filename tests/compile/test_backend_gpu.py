"""The "flashgen" backend on the GPU with real bf16 kernels (skipped without CUDA).

The CPU tests (test_backend.py) run tiny float32 models through the interpreter; here the same
path compiles real-width blocks (head dim 64 and 128, odd sequence lengths, grouped-query
attention) in bf16 and checks output and input gradient against a float32 copy of the same
model. The bound is relative to what eager bf16 itself gets wrong against that float32 copy: a
replaced attention may not be much worse than the model it replaces.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from attention_blocks import GroupedSdpa

from flashgen.compile import patterns
from flashgen.compile.backend import backend

pytestmark = pytest.mark.gpu


class HandWritten(nn.Module):
    """Hand-written causal attention (matmul, tril mask, softmax in float32, matmul)."""

    def __init__(self, width: int, head_dim: int):
        super().__init__()
        self.h, self.d = width // head_dim, head_dim
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.h, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
        y = F.softmax(s.float(), dim=-1).to(q.dtype) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def _replaced() -> int:
    return sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))


def _run(model, x):
    x = x.clone().requires_grad_()
    out = model(x)
    (grad,) = torch.autograd.grad(out.float().square().mean(), x)
    return out.float(), grad.float()


@pytest.mark.parametrize(
    "make, head_dim, t",
    [
        (HandWritten, 64, 333),
        (HandWritten, 128, 1000),
        (GroupedSdpa, 64, 517),
        (GroupedSdpa, 128, 257),
    ],
)
def test_bf16_block_on_gpu_matches_float32_model(make, head_dim, t):
    torch.manual_seed(0)
    width = 8 * head_dim
    ref = make(width, head_dim).cuda()
    eager = copy.deepcopy(ref).to(torch.bfloat16)
    x = torch.randn(2, t, width, device="cuda")
    want, want_grad = _run(ref, x)
    eager_out, eager_grad = _run(eager, x.bfloat16())

    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(eager), backend=backend())
    before = _replaced()
    got, got_grad = _run(compiled, x.bfloat16())
    assert _replaced() - before == 1

    for ours, theirs, exact in ((got, eager_out, want), (got_grad, eager_grad, want_grad)):
        assert torch.isfinite(ours).all()
        scale = exact.abs().max().item()
        eager_err = (theirs - exact).abs().max().item()
        our_err = (ours - exact).abs().max().item()
        assert our_err <= 2 * eager_err + 1e-3 * scale, (our_err, eager_err, scale)


def _hf_model(family: str):
    """A 2-layer HF model at head dim 64 in bf16 (random weights from a config) and a padded
    [2, 1024] attention_mask for it: ModernBERT through SDPA (a local layer: a window beside
    the padding; right padding), Llama's eager attention (causal and left padding)."""
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=128, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                  num_attention_heads=8, max_position_embeddings=1024, pad_token_id=0)  # fmt: skip
    mask = torch.ones(2, 1024, dtype=torch.long, device="cuda")
    if family == "modernbert":
        cfg = transformers.ModernBertConfig(
            global_attn_every_n_layers=2, local_attention=128, reference_compile=False,
            embedding_dropout=0.0, mlp_dropout=0.0, attention_dropout=0.0,
            initializer_range=0.05, **common,
        )  # fmt: skip
        attn = "sdpa"
        mask[1, 700:] = 0
    else:
        cfg = transformers.LlamaConfig(num_key_value_heads=2, attention_dropout=0.0, **common)
        attn = "eager"
        mask[1, :300] = 0
    model = transformers.AutoModel.from_config(cfg, attn_implementation=attn)
    return model.cuda().to(torch.bfloat16).train(), mask


@pytest.mark.parametrize("family", ["modernbert", "llama"])
def test_hf_model_under_cuda_graphs_matches_it_without(family):
    """HF ModernBERT and Llama at 1k tokens compiled with `backend(cudagraphs=True)`: two
    forward+backward calls, then no-grad forwards, each equal (at the valid positions) to the
    backend without graphs. Session 53: a buffer the launchers keep, made during the CUDA-graph
    trees' warm-up inside their pool, stopped both models (`flashgen.kernels.lasting`)."""
    model, mask = _hf_model(family)
    gen = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(1, 128, (2, 1024), device="cuda", generator=gen)
    x = model.get_input_embeddings()(ids).detach()
    valid = mask.bool()[..., None]
    # random weights: the models end in a norm, whose rows' sum of squares does not move
    weight = torch.randn(2, 1024, 512, device="cuda", generator=gen) * valid
    torch._dynamo.reset()
    graphed = torch.compile(copy.deepcopy(model), backend=backend(cudagraphs=True))
    plain = torch.compile(copy.deepcopy(model), backend=backend())
    before = _replaced()
    for _ in range(2):
        results = []
        for compiled in (graphed, plain):
            torch.compiler.cudagraph_mark_step_begin()
            xi = x.clone().requires_grad_()
            out = compiled(inputs_embeds=xi, attention_mask=mask).last_hidden_state * valid
            (grad,) = torch.autograd.grad((out.float() * weight).sum(), xi)
            results.append((out.detach().clone(), grad.clone()))  # graph outputs get reused
        torch.testing.assert_close(results[0], results[1], atol=1e-2, rtol=1e-2)
    assert _replaced() - before == 4  # both layers' attention in each compiled model
    with torch.no_grad():
        for _ in range(2):
            torch.compiler.cudagraph_mark_step_begin()
            out = graphed(inputs_embeds=x, attention_mask=mask).last_hidden_state * valid
            want = plain(inputs_embeds=x, attention_mask=mask).last_hidden_state * valid
            torch.testing.assert_close(out, want, atol=1e-2, rtol=1e-2)
    torch._dynamo.reset()
