"""Masks under dynamic sequence lengths (issue 11): a property proven about a mask must hold for
every length the compiled graph accepts, not only the traced one.

A sliding-window band with window W equals the causal mask at every length <= W and not above,
so a graph traced at a short length and reused at a long one must not take it as causal: it is
replaced by the windowed kernel (window W, the same mask at every length, issue 16) instead. The
tests cross that boundary (T below, equal to and above W) with `dynamic=True`, with Dynamo's
automatic dynamic (a static first compile, then a symbolic recompile), and with bounded
`mark_dynamic` ranges; numbers are compared with a float64 eager reference at every length, and
genuine causal masks must still be replaced in the symbolic graphs.

Kernels run in Triton's interpreter on the CPU: shapes are tiny.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend
from flashgen.compile.patterns import attention_pass

B, H, D, W = 1, 2, 16, 6
LENGTHS = (3, 5, W, W + 1, 11)  # below, equal to and above the window
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _scores(q, k):
    return (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))


# ------------------------------------------------------------------ sliding windows (never causal)


def band_ones_tril_triu(q, k, v):
    t = q.size(-2)
    band = torch.ones(t, t, dtype=torch.bool, device=q.device).tril().triu(-(W - 1))
    return _scores(q, k).masked_fill(~band, float("-inf")).softmax(-1) @ v


def band_arange_compare(q, k, v):
    t = q.size(-2)
    i = torch.arange(t, device=q.device)[:, None]
    j = torch.arange(t, device=q.device)[None, :]
    keep = (j <= i) & (j > i - W)
    return _scores(q, k).masked_fill(keep.logical_not(), float("-inf")).softmax(-1) @ v


def band_where(q, k, v):
    t = q.size(-2)
    band = torch.triu(torch.tril(torch.ones(t, t, device=q.device)), diagonal=-(W - 1)) > 0
    return torch.where(band, _scores(q, k), float("-inf")).softmax(-1) @ v


class BandBuffer(nn.Module):
    """A window band stored as a buffer and sliced by the length."""

    def __init__(self, max_t=64):
        super().__init__()
        band = torch.ones(max_t, max_t).tril().triu(-(W - 1)).view(1, 1, max_t, max_t)
        self.register_buffer("band", band)

    def forward(self, q, k, v):
        t = q.size(-2)
        att = _scores(q, k).masked_fill(self.band[:, :, :t, :t] == 0, float("-inf"))
        return att.softmax(-1) @ v


def band_sdpa_bool(q, k, v):
    t = q.size(-2)
    i = torch.arange(t, device=q.device).unsqueeze(-1)
    j = torch.arange(t, device=q.device).unsqueeze(0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(i >= j) & (i - W < j))


class BandAdditiveBuffer(nn.Module):
    """HF-style additive band: 0 inside the window, -inf elsewhere."""

    def __init__(self, max_t=64):
        super().__init__()
        keep = torch.ones(max_t, max_t, dtype=torch.bool).tril().triu(-(W - 1))
        self.register_buffer("bias", torch.zeros(max_t, max_t).masked_fill(~keep, float("-inf")))

    def forward(self, q, k, v):
        t = q.size(-2)
        return (_scores(q, k) + self.bias[:t, :t]).softmax(-1) @ v


# ------------------------------------------------------------------ genuine causal masks


def causal_ones_tril(q, k, v):
    t = q.size(-2)
    keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    return _scores(q, k).masked_fill(~keep, float("-inf")).softmax(-1) @ v


def causal_arange(q, k, v):
    t = q.size(-2)
    r = torch.arange(t, device=q.device)
    return _scores(q, k).masked_fill(r[None, :] > r[:, None], float("-inf")).softmax(-1) @ v


def causal_where(q, k, v):
    t = q.size(-2)
    keep = torch.ones(t, t, device=q.device).tril() == 1
    return torch.where(keep, _scores(q, k), float("-inf")).softmax(-1) @ v


class CausalBuffer(nn.Module):
    def __init__(self, max_t=64):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(max_t, max_t)).view(1, 1, max_t, max_t))

    def forward(self, q, k, v):
        t = q.size(-2)
        att = _scores(q, k).masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return att.softmax(-1) @ v


def sdpa_arange_offset(q, k, v):
    """KV-cache style (bottom-right) causal mask: causal in SDPA's top-left sense only while
    the query and key lengths are equal."""
    tq, tk = q.size(-2), k.size(-2)
    i = torch.arange(tk - tq, tk, device=q.device)[:, None]
    j = torch.arange(tk, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j <= i)


def causal_additive_full_triu(q, k, v):
    t = q.size(-2)
    bias = torch.full((t, t), float("-inf"), device=q.device).triu(1)
    return (_scores(q, k) + bias).softmax(-1) @ v


BANDS = [
    ("ones_tril_triu", band_ones_tril_triu),
    ("arange_compare", band_arange_compare),
    ("where", band_where),
    ("buffer_sliced", BandBuffer),
    ("sdpa_bool", band_sdpa_bool),
    ("additive_buffer", BandAdditiveBuffer),
]
CAUSAL = [
    ("ones_tril", causal_ones_tril),
    ("arange", causal_arange),
    ("where", causal_where),
    ("buffer_sliced", CausalBuffer),
    ("additive_full_triu", causal_additive_full_triu),
]


def _make(fn):
    return fn().to(DEVICE) if isinstance(fn, type) else fn


def _qkv(t, seed=0):
    g = torch.Generator().manual_seed(seed + t)
    return [torch.randn(B, H, t, D, generator=g).to(DEVICE) for _ in range(3)]


def _is_symbolic(example_inputs) -> bool:
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in x.shape):
            return True
    return False


def _report_sites(model, *args, dynamic):
    """(symbolic?, sites) per graph, from the pass in report-only mode (no kernels run)."""
    graphs = []

    def report(gm, example_inputs):
        sites = attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
        graphs.append((_is_symbolic(example_inputs), sites))
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.compile(model, backend=report, dynamic=dynamic)(*args)
    finally:
        torch._dynamo.reset()
    return graphs


def _recording_backend():
    """The flashgen backend, recording per compiled graph (symbolic?, replaced, skip reasons):
    the counts from what the backend really replaced, the reasons from a report-only pass."""
    inner = backend(fallback="aot_eager")
    graphs = []

    def compile_graph(gm, example_inputs):
        reasons = [
            s.reason
            for s in attention_pass(gm, list(example_inputs), None, rewrite_graph=False)
            if not s.replaced
        ]
        before = patterns.counters.copy()
        out = inner(gm, example_inputs)
        replaced = sum(
            v - before.get(k, 0) for k, v in patterns.counters.items() if k.endswith(".replaced")
        )
        graphs.append((_is_symbolic(example_inputs), replaced, reasons))
        return out

    return compile_graph, graphs


def _run_lengths(model, dynamic):
    """Compile once, call at every length, compare each with float64 eager."""
    compile_graph, graphs = _recording_backend()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=compile_graph, dynamic=dynamic)
    for t in LENGTHS:
        q, k, v = _qkv(t)
        with torch.no_grad():
            got = compiled(q, k, v)
            want = model(*(x.double() for x in (q, k, v)))
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4, msg=f"T={t}")
    torch._dynamo.reset()
    return graphs


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic_true", "automatic_dynamic"])
@pytest.mark.parametrize("entry", BANDS, ids=[e[0] for e in BANDS])
def test_window_band_is_replaced_as_a_window_never_as_causal(entry, dynamic):
    """Every graph replaces the band (numbers vs float64 eager at every length, in
    `_run_lengths`); the symbolic graph's site is the windowed kernel with window W."""
    graphs = _run_lengths(_make(entry[1]), dynamic)
    symbolic = [g for g in graphs if g[0]]
    assert symbolic, f"no graph with symbolic lengths was compiled: {graphs}"
    # automatic dynamic gives SDPA's q and k lengths separate symbols: skipped as such, never
    # as causal
    assert all(r == 1 or "different sequence lengths" in why[0] for _, r, why in graphs), graphs
    q, k, v = _qkv(W + 3)
    sites = [s for sym, found in _report_sites(_make(entry[1]), q, k, v, dynamic=True)
             for s in found if sym]  # fmt: skip
    assert [(s.replaced, s.causal, s.window) for s in sites] == [(True, True, W)], sites


def _two_sided_band(q, k, v):
    t = q.size(-2)
    band = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(2).triu(-(W - 1))
    return _scores(q, k).masked_fill(~band, float("-inf")).softmax(-1) @ v


def _band_with_a_hole(q, k, v):
    t = q.size(-2)
    r = torch.arange(t, device=q.device)
    i, j = r[:, None], r[None, :]
    keep = (j <= i) & (j > i - W) & (j != i - 2)
    return _scores(q, k).masked_fill(~keep, float("-inf")).softmax(-1) @ v


def test_a_band_with_a_gap_is_skipped():
    """A band with a hole is neither causal nor a window: left to Inductor, and the compiled
    graph still matches eager."""
    graphs = _run_lengths(_band_with_a_hole, True)
    assert graphs and all(g[1] == 0 and "not causal" in g[2][0] for g in graphs), graphs


def _upper_offset(q, k, v):
    """`tril(2)`: every key up to two past the query (a band open on the left)."""
    t = q.size(-2)
    keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(2)
    return _scores(q, k).masked_fill(~keep, torch.finfo(q.dtype).min).softmax(-1) @ v


def _sdpa_two_sided(q, k, v):
    t = q.size(-2)
    r = torch.arange(t, device=q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(r[None, :] - r[:, None]).abs() < W)


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic_true", "automatic_dynamic"])
@pytest.mark.parametrize(
    "fn, window",
    [(_two_sided_band, (W - 1, 2)), (_upper_offset, (patterns.masks.UNBOUNDED, 2)),
     (_sdpa_two_sided, (W - 1, W - 1))],
    ids=["tril_triu", "tril_offset", "sdpa_abs"],
)  # fmt: skip
def test_two_sided_band_is_replaced_as_a_window_at_every_length(fn, window, dynamic):
    """A band reaching above the diagonal is the windowed kernel without causal, window (left,
    right) (a side the mask never closes: UNBOUNDED), proven for every length: every graph
    replaces it and matches float64 eager at lengths below, at and above the band's width."""
    graphs = _run_lengths(fn, dynamic)
    assert graphs and all(g[1] == 1 for g in graphs), graphs
    q, k, v = _qkv(W + 3)
    sites = [s for sym, found in _report_sites(fn, q, k, v, dynamic=True) for s in found if sym]
    assert [(s.replaced, s.causal, s.window) for s in sites] == [(True, False, window)], sites


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic_true", "automatic_dynamic"])
@pytest.mark.parametrize("entry", CAUSAL, ids=[e[0] for e in CAUSAL])
def test_causal_mask_is_still_replaced_for_every_length(entry, dynamic):
    graphs = _run_lengths(_make(entry[1]), dynamic)
    assert all(replaced == 1 for _, replaced, _ in graphs), graphs
    assert any(g[0] for g in graphs), f"no graph with symbolic lengths was compiled: {graphs}"


def test_kv_offset_mask_is_causal_only_where_lengths_are_provably_equal():
    """dynamic=True gives q and k one length symbol (equal at trace time): the offset tk - tq
    is 0 and the mask is causal. Automatic dynamic gives them separate symbols, so the same
    graph would serve tq != tk, where the mask is bottom-right aligned: the mask is proven as
    such (causal_align="bottom_right", for every pair of lengths; issue 17), so it is never the
    reason for a skip (automatic dynamic also gives k and v separate symbols, which is)."""
    graphs = _run_lengths(sdpa_arange_offset, True)
    assert [g[1] for g in graphs] == [1], graphs
    graphs = _run_lengths(sdpa_arange_offset, None)
    symbolic = [g for g in graphs if g[0]]
    assert symbolic and all(g[1] == 1 or "mask" not in g[2][0] for g in symbolic), graphs


def test_issue_repro_sliding_window_module_across_lengths():
    """The issue's model (projections inside, window 16, lengths 8, 12, 40), dynamic=True: the
    band is replaced by the windowed kernel and matches eager at every length."""

    class SW(nn.Module):
        def __init__(s, d=32, h=2, w=16):
            super().__init__()
            s.qkv = nn.Linear(d, 3 * d)
            s.h, s.w = h, w

        def forward(s, x):
            b, t, c = x.shape
            q, k, v = s.qkv(x).view(b, t, 3, s.h, c // s.h).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) / math.sqrt(c // s.h)
            band = torch.ones(t, t, dtype=torch.bool, device=x.device).tril().triu(-(s.w - 1))
            att = att.masked_fill(~band, float("-inf"))
            return (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)

    m = SW().to(DEVICE).eval()
    compile_graph, graphs = _recording_backend()
    torch._dynamo.reset()
    cm = torch.compile(m, backend=compile_graph, dynamic=True)
    for t in (8, 12, 40):
        x = torch.randn(2, t, 32, generator=torch.Generator().manual_seed(t)).to(DEVICE)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), m(x), atol=1e-4, rtol=1e-4, msg=f"T={t}")
    torch._dynamo.reset()
    assert [(sym, replaced) for sym, replaced, _ in graphs] == [(True, 1)], graphs


def test_static_graph_at_a_length_inside_the_window_may_use_causal():
    """Static shapes: the graph is guarded on its length, so a band that equals causal there is
    causal for every call the graph serves; at T = W + 1 it is the window W."""
    (graph,) = _report_sites(band_ones_tril_triu, *_qkv(W), dynamic=False)
    assert not graph[0] and graph[1][0].replaced and graph[1][0].causal
    assert graph[1][0].window is None
    (graph,) = _report_sites(band_ones_tril_triu, *_qkv(W + 1), dynamic=False)
    assert graph[1][0].replaced and graph[1][0].window == W


@pytest.mark.parametrize("upper,window", [(W, None), (W + 1, W)], ids=["max_W", "max_W+1"])
def test_bounded_dynamic_length_uses_the_upper_bound(upper, window):
    """mark_dynamic(max=...) bounds the lengths the graph accepts (Dynamo guards the range):
    the band is causal for every length up to W, and the window W when W + 1 is accepted."""
    q, k, v = _qkv(4)
    for x in (q, k, v):
        torch._dynamo.mark_dynamic(x, 2, min=2, max=upper)
    graphs = _report_sites(band_ones_tril_triu, q, k, v, dynamic=None)
    ((symbolic, (site,)),) = graphs
    assert symbolic and site.replaced and site.window == window, site


def _mutated_mask(q, k, v):
    t = q.size(-2)
    keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    keep[:, 0] = False  # looks causal when read from its construction, is not
    return torch.where(keep, _scores(q, k), -1e9).softmax(-1) @ v


def _mask_from_input_length(q, k, v, window: torch.Tensor):
    t = q.size(-2)
    r = torch.arange(t, device=q.device)
    keep = (r[None, :] <= r[:, None]) & (r[None, :] > r[:, None] - window)
    return _scores(q, k).masked_fill(~keep, float("-inf")).softmax(-1) @ v


def _sliced_offset_by_length(q, k, v):
    """tril(ones(2T, 2T))[T:, :T]: offset T, causal only where T is tiny."""
    t = q.size(-2)
    big = torch.ones(2 * t, 2 * t, dtype=torch.bool, device=q.device).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=big[t:, :t])


def test_sliced_mask_is_read_as_a_tensor_and_correct():
    """tril(ones(2T, 2T))[T:, :T] is not proven causal for every T: the kernel reads the mask
    tensor itself (issue 16), correct at every length."""
    q, k, v = _qkv(7)
    ((_, (site,)),) = _report_sites(_sliced_offset_by_length, q, k, v, dynamic=True)
    assert site.replaced and site.mask == "bool" and site.causal is False, site
    torch._dynamo.reset()
    compiled = torch.compile(_sliced_offset_by_length, backend="flashgen", dynamic=True)
    for t in (5, 9):
        q, k, v = _qkv(t)
        torch.testing.assert_close(compiled(q, k, v), _sliced_offset_by_length(q, k, v),
                                   atol=2e-5, rtol=1e-4)  # fmt: skip
    torch._dynamo.reset()


def test_a_mask_modified_in_place_is_read_as_a_tensor_and_correct():
    """A mask modified in place cannot be proven causal from its construction; filled with a
    finite value at or below float16's min it goes to the kernels as a boolean attn_mask (data,
    no proof needed), its fully hidden row 0 giving eager's mean of v; correct at every length."""
    q, k, v = _qkv(7)
    ((_, (site,)),) = _report_sites(_mutated_mask, q, k, v, dynamic=True)
    assert site.replaced and site.mask == "bool" and site.causal is False, site
    torch._dynamo.reset()
    compiled = torch.compile(_mutated_mask, backend=backend(fallback="aot_eager"), dynamic=True)
    for t in (5, 9):
        q, k, v = _qkv(t)
        torch.testing.assert_close(compiled(q, k, v), _mutated_mask(q, k, v), atol=2e-5, rtol=1e-4)
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "fn,extra,reason",
    [(_mask_from_input_length, (torch.tensor(3),), "forward() input")],
    ids=["window_from_input"],
)
def test_unprovable_masks_are_skipped_and_correct(fn, extra, reason):
    q, k, v = _qkv(7)
    ((_, (site,)),) = _report_sites(fn, q, k, v, *extra, dynamic=True)
    assert not site.replaced and reason in site.reason, site.reason
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend(fallback="aot_eager"), dynamic=True)
    for t in (5, 9):
        q, k, v = _qkv(t)
        torch.testing.assert_close(compiled(q, k, v, *extra), fn(q, k, v, *extra))
    torch._dynamo.reset()


# ------------------------------------------------------------------ masks from key - query offsets


def _offsets(q):
    t = q.size(-2)
    r = torch.arange(t, device=q.device)
    return r[:, None], r[None, :]  # i (query rows), j (keys)


def _masked(q, k, v, hide):
    return _scores(q, k).masked_fill(hide, float("-inf")).softmax(-1) @ v


def offset_abs_method(q, k, v):
    i, j = _offsets(q)
    return _masked(q, k, v, (j - i).abs() >= W)


def offset_torch_abs(q, k, v):
    i, j = _offsets(q)
    return _masked(q, k, v, ~(torch.abs(i - j) <= W - 1))


def offset_causal(q, k, v):
    i, j = _offsets(q)
    return _masked(q, k, v, (i - j) < 0)


def offset_window(q, k, v):
    i, j = _offsets(q)
    return _masked(q, k, v, ((j - i) > 0) | (j - i <= -W))


def offset_shifted_abs(q, k, v):
    """|d + 2| < 3: offsets -4 to 0, a causal window of 5 keys."""
    i, j = _offsets(q)
    return _masked(q, k, v, (j - i + 2).abs() >= 3)


@pytest.mark.parametrize(
    "fn, causal, window",
    [(offset_abs_method, False, (W - 1, W - 1)), (offset_torch_abs, False, (W - 1, W - 1)),
     (offset_causal, True, None), (offset_window, True, W), (offset_shifted_abs, True, 5)],
    ids=["abs_method", "torch_abs", "causal", "window", "shifted_abs"],
)  # fmt: skip
def test_masks_from_the_key_query_offset(fn, causal, window):
    """`j - i` of a column and a row arange, compared with constants (through abs, negation and
    added constants): the causal mask, a causal window or a two-sided band, proven for every
    length and replaced; numbers match float64 eager at every length."""
    graphs = _run_lengths(fn, True)
    assert graphs and all(g[1] == 1 for g in graphs), graphs
    q, k, v = _qkv(W + 3)
    sites = [s for sym, found in _report_sites(fn, q, k, v, dynamic=True) for s in found if sym]
    assert [(s.replaced, s.causal, s.window) for s in sites] == [(True, causal, window)], sites


def offset_outside_band(q, k, v):
    i, j = _offsets(q)
    return _masked(q, k, v, (j - i).abs() < 1)  # every key but the diagonal


def test_a_mask_that_hides_the_diagonal_by_offset_is_skipped():
    """Every key but the query's own: not causal, not a band; left to Inductor (every
    row still sees a key at these lengths, so eager has no NaN to compare)."""
    graphs = _run_lengths(offset_outside_band, True)
    assert graphs and all(g[1] == 0 and "not causal" in g[2][0] for g in graphs), graphs


def kv_cache_window(q, k, v):
    """Mistral's sliding window over a KV cache: the last tq of tk positions, each seeing the
    W keys ending at its own position."""
    tq, tk = q.size(-2), k.size(-2)
    i = torch.arange(tk - tq, tk, device=q.device)[:, None]
    j = torch.arange(tk, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - W))


def test_kv_cache_window_is_replaced_counted_from_the_bottom_right():
    """Query and key lengths with separate symbols (automatic dynamic): the band is proven as a
    causal window of W keys ending at the bottom-right diagonal, for every pair of lengths, and
    replaced so; numbers match float64 eager at pairs on both sides of the window."""
    compile_graph, graphs = _recording_backend()
    torch._dynamo.reset()
    compiled = torch.compile(kv_cache_window, backend=compile_graph, dynamic=None)
    for tq, tk in ((3, 3), (2, 9), (4, 5), (1, 12), (7, 16)):
        q = _qkv(tq, seed=1)[0]
        _, k, v = _qkv(tk, seed=2)
        with torch.no_grad():
            got = compiled(q, k, v)
            want = kv_cache_window(*(x.double() for x in (q, k, v)))
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4, msg=f"{tq}, {tk}")
    torch._dynamo.reset()
    assert graphs and all(g[1] == 1 for g in graphs), graphs
    q, k = _qkv(2, seed=1)[0], _qkv(9, seed=2)[1]
    sites = [s for sym, found in _report_sites(kv_cache_window, q, k, k, dynamic=True)
             for s in found if sym]  # fmt: skip
    assert [(s.replaced, s.causal, s.window, s.align) for s in sites] == [
        (True, True, W, "bottom_right")
    ], sites
    report = flashgen.explain(kv_cache_window, q, k, k)
    assert f"window {W} bottom-right" in str(report), str(report)


def kv_cache_padded(q, k, v, pad):
    """A padded batch over a KV cache: the bottom-right causal comparison `&` a key mask."""
    tq, tk = q.size(-2), k.size(-2)
    i = torch.arange(tk - tq, tk, device=q.device)[:, None]
    j = torch.arange(tk, device=q.device)[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & pad[:, None, None, :])


def test_kv_cache_causal_and_key_mask_is_split_bottom_right():
    """`causal & keep` with a KV cache's query positions: the op gets bottom-right causal and
    `keep` as a key mask, for every pair of lengths; numbers match float64 eager."""
    compile_graph, graphs = _recording_backend()
    torch._dynamo.reset()
    compiled = torch.compile(kv_cache_padded, backend=compile_graph, dynamic=True)
    for tq, tk in ((2, 9), (4, 5), (1, 12), (6, 6)):
        q = _qkv(tq, seed=1)[0]
        _, k, v = _qkv(tk, seed=2)
        pad = torch.ones(B, tk, dtype=torch.bool, device=DEVICE)
        pad[:, :2] = False  # left padding: the first keys hidden
        with torch.no_grad():
            got = compiled(q, k, v, pad)
            want = kv_cache_padded(*(x.double() for x in (q, k, v)), pad)
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4, msg=f"{tq}, {tk}")
    torch._dynamo.reset()
    assert graphs and all(g[1] == 1 for g in graphs), graphs
    q, k = _qkv(2, seed=1)[0], _qkv(9, seed=2)[1]
    pad = torch.ones(B, 9, dtype=torch.bool, device=DEVICE)
    sites = [s for sym, found in _report_sites(kv_cache_padded, q, k, k, pad, dynamic=True)
             for s in found if sym]  # fmt: skip
    assert [(s.replaced, s.causal, s.align, s.mask) for s in sites] == [
        (True, True, "bottom_right", "bool")
    ], sites


class ScaleAttribute(nn.Module):
    """HF's spelling of the scale: a float attribute (`self.scaling = head_dim ** -0.5`), which
    `dynamic=True` leaves a symbolic float."""

    def __init__(self, scaling):
        super().__init__()
        self.scaling = scaling

    def forward(self, q, k, v):
        t = q.size(-2)
        keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        s = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def test_a_float_attribute_scale_is_guarded_not_refused():
    """The symbolic float is guarded to its value (as the head dim is): replaced, one graph for
    every length, matching float64 eager at each (`_run_lengths`), for two values."""
    for scaling in (D**-0.5, 0.1):
        graphs = _run_lengths(ScaleAttribute(scaling), True)
        assert [g[1] for g in graphs] == [1], graphs  # one graph for every length, replaced


class SoftcapAttribute(nn.Module):
    """Gemma-2's spelling: the cap a float attribute, which `dynamic=True` leaves symbolic."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def forward(self, q, k, v):
        t = q.size(-2)
        keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        s = _scores(q, k)
        s = torch.tanh(s / self.cap) * self.cap
        return s.masked_fill(~keep, float("-inf")).softmax(-1) @ v


def test_a_float_attribute_softcap_is_guarded_not_refused():
    # a cap small against these scores: a dropped cap would show in `_run_lengths`' comparison
    graphs = _run_lengths(SoftcapAttribute(1.5), True)
    assert [g[1] for g in graphs] == [1], graphs
