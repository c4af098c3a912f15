"""nn.TransformerEncoderLayer served for inference (eval mode, no gradient): its forward calls
the fused `torch._transformer_encoder_layer_fwd`, which the pass writes out as the unfused
layer around an nn.MultiheadAttention site where that attention is replaced
(`flashgen.compile.patterns.encoder_layer`), and leaves fused where the fused op reads its mask
otherwise than the kernels would (a key padding mask, a src_mask not proven causal)."""

from __future__ import annotations

import functools

import pytest
import torch

import flashgen
from flashgen.compile.backend import backend
from flashgen.compile.patterns import attention_pass, counters

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FUSED = torch._transformer_encoder_layer_fwd
E, HEADS = 64, 4


def _encoder(norm_first: bool, gelu: bool, layers: int = 2) -> torch.nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        E, HEADS, 2 * E, batch_first=True, norm_first=norm_first,
        activation="gelu" if gelu else "relu",
    )  # fmt: skip
    enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
    return enc.to(DEVICE).eval()


@functools.cache
def traces_symbolic() -> bool:
    """Whether this torch's Dynamo traces the fused op with symbolic sizes: torch 2.11's
    compiles no graph for it under dynamic=True and runs the layer eagerly (session 65, on
    the device's GPU and CPU alike); torch 2.13's does."""
    layer = _encoder(False, False, layers=1).layers[0]
    graphs = []

    def count(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(layer, backend=count, dynamic=True)(torch.randn(2, 5, E, device=DEVICE))
    torch._dynamo.reset()
    return bool(graphs)


def _compile(fn, dynamic=None, **kw):
    """fn compiled with the flashgen backend (aot_eager for the rest), with symbolic sizes
    where this torch traces the fused op so (`traces_symbolic`), else static; the graphs as
    the pass left them are collected in the returned list."""
    graphs = []
    inner = backend(fallback="aot_eager", **kw)

    def spy(gm, example_inputs):
        out = inner(gm, example_inputs)
        graphs.append(gm)
        return out

    if dynamic is None:
        dynamic = traces_symbolic()
    torch._dynamo.reset()
    counters.clear()
    return torch.compile(fn, backend=spy, dynamic=dynamic), graphs


def _fused(graphs) -> int:
    return sum(n.target is FUSED for gm in graphs for n in gm.graph.nodes)


def _ours(graphs) -> int:
    """How many flashgen ops the compiled graphs call. (The counters may count a graph twice:
    under dynamic=True Dynamo restarts a graph whose float attribute the pass specialised,
    the layer norms' eps here, after the pass has run on it once.)"""
    return sum("flashgen" in str(n.target) for gm in graphs for n in gm.graph.nodes)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("mask", ["none", "causal"])
@pytest.mark.parametrize("norm_first,gelu", [(False, False), (True, True), (False, True)])
def test_fused_layer_replaced_and_matches_eager(mask, norm_first, gelu, dynamic):
    """No mask, or the causal mask built in forward(): each layer's attention is replaced
    (the fused op written out), and the compiled encoder equals eager's fused forward at
    several lengths, of one graph with symbolic sizes or of one graph a length."""
    if dynamic and not traces_symbolic():
        pytest.skip("this torch's Dynamo runs the fused op eagerly under dynamic=True")
    enc = _encoder(norm_first, gelu)

    def f(x):
        if mask == "causal":
            causal = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], x.device)
            return enc(x, mask=causal, is_causal=True)
        return enc(x)

    compiled, graphs = _compile(f, dynamic=dynamic)
    with torch.no_grad():
        for n in (5, 11, 8):
            x = torch.randn(2, n, E, device=DEVICE)
            want = f(x)
            got = compiled(x)
            torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert len(graphs) == (1 if dynamic else 3)
    assert _ours(graphs) == 2 * len(graphs) and _fused(graphs) == 0


def test_padding_mask_stays_fused():
    """A src_key_padding_mask: the fused op gives a row with every key padded NaN, the kernels
    zeros, so the layer stays fused, with that reason, and the result is PyTorch's own."""
    enc = _encoder(False, False)
    compiled, graphs = _compile(lambda x, pad: enc(x, src_key_padding_mask=pad))
    x = torch.randn(2, 7, E, device=DEVICE)
    pad = torch.zeros(2, 7, dtype=torch.bool, device=DEVICE)
    pad[1, 4:] = True
    with torch.no_grad():
        got = compiled(x, pad)
        want = enc(x, src_key_padding_mask=pad)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert counters["mha.replaced"] == 0 and counters["mha.skipped"] >= 2, dict(counters)
    assert _ours(graphs) == 0 and _fused(graphs) == 2
    with torch.no_grad():
        report = flashgen.explain(lambda x, p: enc(x, src_key_padding_mask=p), x, pad)
    assert [s.replaced for s in report.sites] == [False, False]
    assert all("src_key_padding_mask" in s.reason for s in report.sites)


def test_float_mask_not_causal_stays_fused():
    """An additive src_mask that is not causal: the fused op reads it as boolean (any nonzero
    entry hides its key), so writing the layer out would change the result: left fused, and
    the compiled encoder equals eager's (which reads a small bias as hiding)."""
    # (the layer itself: nn.TransformerEncoder reads a mask input with .item() to detect a
    # causal one, a graph break after which Dynamo leaves torch.nn's frames to eager)
    enc = _encoder(True, False, layers=1).layers[0]
    compiled, graphs = _compile(lambda x, m: enc(x, src_mask=m))
    x = torch.randn(2, 6, E, device=DEVICE)
    bias = 0.1 * torch.randn(6, 6, device=DEVICE)
    bias[:, 0] = 0.0  # (every row sees a key)
    with torch.no_grad():
        got = compiled(x, bias)
        want = enc(x, src_mask=bias)
    unfused = enc(x, src_mask=bias).detach()  # (grad enabled: the unfused layer adds the bias)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert (unfused - want).abs().max() > 1e-3
    assert counters["mha.replaced"] == 0 and _ours(graphs) == 0 and _fused(graphs) == 1


def test_report_only_pass_leaves_the_fused_layer():
    """explain's report-only pass says the fused layer's attention would be replaced and
    leaves the graph as it was (the fused node in place, nothing added)."""
    enc = _encoder(False, True, layers=1)
    seen = []

    def report(gm, example_inputs):
        before = [(n.op, str(n.target)) for n in gm.graph.nodes]
        sites = attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
        seen.append((sites, before == [(n.op, str(n.target)) for n in gm.graph.nodes]))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda x: enc(x), backend=report)(torch.randn(2, 5, E, device=DEVICE))
    [(sites, unchanged)] = seen
    assert unchanged
    assert [(s.kind, s.replaced) for s in sites] == [("mha", True)]


def test_sdpa_false_keeps_the_fused_layer():
    """backend(sdpa=False) leaves PyTorch's fused attention alone, this one included."""
    enc = _encoder(False, False, layers=1)
    compiled, graphs = _compile(lambda x: enc(x), sdpa=False)
    x = torch.randn(2, 5, E, device=DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), enc(x), atol=2e-5, rtol=1e-4)
    assert counters["mha.replaced"] == 0 and _ours(graphs) == 0 and _fused(graphs) == 1


def test_no_op_keeps_the_fused_layer():
    """Without the flashgen op to put in (`attention_pass(op=None)`), the fused layer is not
    written out (its unfused form would replace nothing)."""
    enc = _encoder(False, False, layers=1)
    seen = []

    def rewrite(gm, example_inputs):
        sites = attention_pass(gm, list(example_inputs), None, rewrite_graph=True)
        seen.append((sites, _fused([gm])))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda x: enc(x), backend=rewrite)(torch.randn(2, 5, E, device=DEVICE))
    [(sites, fused)] = seen
    assert fused == 1 and [s.replaced for s in sites] == [False]
    assert "not available" in sites[0].reason


def test_inference_mode_replaced_too():
    """Under `torch.inference_mode()` the layer takes the same fused op: replaced likewise."""
    enc = _encoder(True, False)
    compiled, graphs = _compile(lambda x: enc(x))
    x = torch.randn(2, 9, E, device=DEVICE)
    with torch.inference_mode():
        got, want = compiled(x), enc(x)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert _ours(graphs) == 2 and _fused(graphs) == 0


@pytest.mark.impl_choice  # (the other tests run with the kernels forced: no size rule)
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_size_rule_keeps_small_and_unmasked_layers_fused(monkeypatch, mask):
    """Where the size rules apply (a GPU; here the CPU made one), a layer without a mask stays
    fused at any size (its fused path ran faster), and a causal one below
    FUSED_LAYER_MIN_FLOPS; from it the causal layer is written out."""
    from flashgen.compile.patterns import choice

    monkeypatch.setattr(choice, "MASKED_RULE_DEVICES", (DEVICE,))
    enc = _encoder(False, False, layers=1)

    def f(x):
        if mask == "causal":
            causal = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1], x.device)
            return enc(x, mask=causal, is_causal=True)
        return enc(x)

    x = torch.randn(2, 7, E, device=DEVICE)
    with torch.no_grad():
        report = flashgen.explain(f, x)
    [site] = report.sites
    assert not site.replaced
    assert ("at no size" if mask == "none" else "from 34 GFLOP") in site.reason, site.reason
    monkeypatch.setitem(choice.FUSED_LAYER_MIN_FLOPS, True, 0.0)
    compiled, graphs = _compile(f)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x), atol=2e-5, rtol=1e-4)
    assert _fused(graphs) == (1 if mask == "none" else 0)
    assert _ours(graphs) == (0 if mask == "none" else 1)
