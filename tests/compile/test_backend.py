"""The "flashgen" torch.compile backend on small models in the styles people write.

Each model is compiled through the real path (entry point name "flashgen" -> pattern pass ->
flashgen::attention -> Inductor's compile_fx, except where noted) and compared with eager in
float32: outputs and every parameter gradient. Kernels run in Triton's interpreter, so models are
tiny (width 32, 2 heads of 16, sequence <= 37).
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import flashgen
from flashgen.compile import patterns
from flashgen.compile.backend import backend

C, NH, TMAX = 32, 2, 64
# Like conftest's `device` fixture: the interpreter on CPU, the real kernels where CUDA exists.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _replaced() -> int:
    return sum(v for k, v in patterns.counters.items() if k.endswith(".replaced"))


# --------------------------------------------------------------------------- model styles


class GPTAttention(nn.Module):
    """nanoGPT: fused qkv, tril buffer + masked_fill(-inf), softmax, dropout, @ v."""

    def __init__(self, dropout=0.0):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.attn_dropout = nn.Dropout(dropout)
        self.register_buffer("bias", torch.tril(torch.ones(TMAX, TMAX)).view(1, 1, TMAX, TMAX))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        k = k.view(b, t, NH, c // NH).transpose(1, 2)
        q = q.view(b, t, NH, c // NH).transpose(1, 2)
        v = v.view(b, t, NH, c // NH).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    def __init__(self, attn=None):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = attn if attn is not None else GPTAttention()
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(), nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViTAttention(nn.Module):
    """timm: qkv reshape/permute/unbind, q pre-scaled, non-causal, Tensor.softmax."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(C, 3 * C)
        self.proj = nn.Linear(C, C)
        self.scale = (C // NH) ** -0.5

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, NH, c // NH).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class LlamaAttention(nn.Module):
    """Llama: 4 query heads over 2 KV heads, rotary embedding, SDPA(is_causal, enable_gqa)
    or K/V repeated with repeat_interleave before the products."""

    def __init__(self, repeat=False, heads=4, kv_heads=2, head_dim=16):
        super().__init__()
        self.h, self.hkv, self.d, self.repeat = heads, kv_heads, head_dim, repeat
        self.q_proj = nn.Linear(C, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(C, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(C, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, C, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        ang = torch.outer(torch.arange(TMAX).float(), inv)
        self.register_buffer("cos", torch.cat([ang, ang], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([ang, ang], -1).sin(), persistent=False)

    def rope(self, x, t):
        x1, x2 = x.chunk(2, dim=-1)
        return x * self.cos[:t] + torch.cat([-x2, x1], -1) * self.sin[:t]

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.hkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.hkv, self.d).transpose(1, 2)
        q, k = self.rope(q, t), self.rope(k, t)
        if self.repeat:
            n = self.h // self.hkv
            k, v = k.repeat_interleave(n, dim=1), v.repeat_interleave(n, dim=1)
            s = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.d)
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), 1)
            s = s.masked_fill(causal, float("-inf"))
            y = torch.matmul(F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype), v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.h * self.d))


class LlamaBlock(nn.Module):
    def __init__(self, repeat=False):
        super().__init__()
        self.n1, self.n2 = RMSNorm(C), RMSNorm(C)
        self.attn = LlamaAttention(repeat=repeat)
        self.gate, self.up = nn.Linear(C, 2 * C, bias=False), nn.Linear(C, 2 * C, bias=False)
        self.down = nn.Linear(2 * C, C, bias=False)

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class AlibiAttention(GPTAttention):
    """An additive position bias (ALiBi-like): not causal, read by the kernels as a tensor."""

    def __init__(self):
        super().__init__()
        pos = torch.arange(TMAX).float()
        self.register_buffer("alibi", -(pos[None, :] - pos[:, None]).abs() * 0.1)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(b, t, NH, c // NH).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1))) + self.alibi[:t, :t]
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


# --------------------------------------------------------------------------- helpers


def _compare(model, x, compile_backend="flashgen", expect_replaced=1, tol=2e-4):
    torch.manual_seed(0)
    eager = model.to(DEVICE)
    comp = copy.deepcopy(eager)
    torch._dynamo.reset()
    compiled = torch.compile(comp, backend=compile_backend)
    before = _replaced()
    x1 = x.clone().requires_grad_()
    x2 = x.clone().requires_grad_()
    got = compiled(x1)
    assert _replaced() - before == expect_replaced
    want = eager(x2)
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    grad = torch.randn_like(want)
    got.backward(grad)
    want.backward(grad)
    torch.testing.assert_close(x1.grad, x2.grad, atol=tol, rtol=tol)
    for (name, p1), (_, p2) in zip(comp.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p1.grad, p2.grad, atol=tol, rtol=tol, msg=name)


def _x(t=37, b=2, seed=1):
    return torch.randn(b, t, C, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


# --------------------------------------------------------------------------- model tests


def test_gpt_block_inductor_matches_eager():
    torch.manual_seed(0)
    _compare(GPTBlock(), _x())


def test_vit_block_matches_eager():
    torch.manual_seed(0)
    _compare(GPTBlock(ViTAttention()), _x(t=17), compile_backend=backend(fallback="aot_eager"))


def test_llama_gqa_sdpa_block_matches_eager():
    torch.manual_seed(0)
    _compare(LlamaBlock(), _x(t=29), compile_backend=backend(fallback="aot_eager"))


def test_llama_repeat_interleave_block_uses_gqa_kernel():
    torch.manual_seed(0)
    model = LlamaBlock(repeat=True)
    report = flashgen.explain(model.to(DEVICE), _x(t=29))
    (site,) = report.sites
    assert site.replaced and site.causal and site.gqa_group == 2, str(report)
    _compare(model, _x(t=29), compile_backend=backend(fallback="aot_eager"))


def test_torch_transformer_encoder_layer_matches_eager():
    """nn.TransformerEncoderLayer -> nn.MultiheadAttention(need_weights=False), causal mask."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(C, NH, 2 * C, dropout=0.0, batch_first=True)

    class Causal(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            mask = nn.Transformer.generate_square_subsequent_mask(x.size(1), device=x.device)
            return self.layer(x, src_mask=mask, is_causal=True)

    model = Causal()
    report = flashgen.explain(model.to(DEVICE), _x(t=21))
    (site,) = report.sites
    assert site.kind == "mha" and site.replaced and site.causal, str(report)
    assert "test_backend.py" in site.location
    _compare(model, _x(t=21), compile_backend=backend(fallback="aot_eager"))


def test_additive_bias_is_read_as_a_mask_tensor_and_correct():
    torch.manual_seed(0)
    model = GPTBlock(AlibiAttention()).to(DEVICE)
    report = flashgen.explain(model, _x())
    assert (report.found, report.replaced) == (1, 1), str(report)
    assert report.sites[0].mask == "add" and "test_backend.py" in report.sites[0].location
    _compare(model, _x(), expect_replaced=1)


def test_two_layer_training_losses_match_eager():
    torch.manual_seed(0)
    model = nn.Sequential(GPTBlock(), GPTBlock(), nn.LayerNorm(C), nn.Linear(C, 8)).to(DEVICE)
    ref = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="flashgen")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, ref)]
    g = torch.Generator().manual_seed(3)
    losses = {"compiled": [], "eager": []}
    for _ in range(3):
        x = torch.randn(2, 33, C, generator=g).to(DEVICE)
        y = torch.randint(0, 8, (2, 33), generator=g).to(DEVICE)
        for name, fn, opt in (("compiled", compiled, opts[0]), ("eager", ref, opts[1])):
            opt.zero_grad()
            loss = F.cross_entropy(fn(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            losses[name].append(loss.item())
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-4, abs=1e-5)
    assert losses["eager"][-1] < losses["eager"][0]


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic_true", "automatic_dynamic"])
def test_new_sequence_length_does_not_recompile(dynamic):
    compiles = []
    inner = backend(fallback="aot_eager")

    def counting(gm, example_inputs):
        compiles.append(gm)
        return inner(gm, example_inputs)

    from flashgen.core.spec import KernelSpec
    from flashgen.runtime import dispatch

    torch.manual_seed(0)
    model = GPTAttention().to(DEVICE)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting, dynamic=dynamic)
    before = _replaced()
    counts = []
    for t in (17, 29, 37, 45):
        x = _x(t=t)
        dispatch.clear_cache()
        torch.testing.assert_close(compiled(x), model(x), atol=2e-4, rtol=2e-4)
        counts.append(len(compiles))
        # the op's body ran with this concrete length: dispatch resolved a config for it
        assert dispatch.source_of(KernelSpec(16, True, "float32", "fwd"), t, t) is not None
    # dynamic=True: one graph for every length; automatic dynamic: one recompile at the second
    # length (the length becomes symbolic), then none.
    # (Dynamo may trace twice on the first call: a float module attribute such as the dropout
    # p is first traced as a tensor, then specialised; only the second graph runs.)
    assert _replaced() - before >= 1
    settled = 0 if dynamic else 1
    assert counts[settled:] == [counts[settled]] * (len(counts) - settled), counts


def test_untuned_shape_is_recorded_as_pending(tmp_path):
    from flashgen.core.spec import KernelSpec, shape_bucket
    from flashgen.db import connect
    from flashgen.runtime import dispatch

    url = f"sqlite:///{tmp_path / 'tuning.sqlite3'}"
    torch.manual_seed(0)
    model = GPTAttention().to(DEVICE)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend=backend(db=url, fallback="aot_eager"))
        compiled(_x(t=23))
        pending = connect(url).pending()
    finally:
        dispatch.set_db(None)
    assert (KernelSpec(16, True, "float32", "fwd"), shape_bucket(23, 23)) in pending, pending


def test_entry_point_works_without_importing_flashgen(tmp_path):
    from importlib.metadata import entry_points

    names = [ep.name for ep in entry_points(group="torch_dynamo_backends")]
    if "flashgen" not in names:
        pytest.skip("flashgen is not pip-installed here, so its entry point is not registered")
    script = textwrap.dedent(
        """
        import sys
        import torch
        import torch.nn.functional as F

        def f(q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        q, k, v = (torch.randn(1, 2, 19, 16, device=dev) for _ in range(3))
        assert "flashgen" not in sys.modules
        out = torch.compile(f, backend="flashgen")(q, k, v)
        from flashgen.compile import patterns
        assert patterns.counters["sdpa.replaced"] == 1, dict(patterns.counters)
        torch.testing.assert_close(out, f(q, k, v), atol=1e-5, rtol=1e-5)
        print("OK")
        """
    )
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_configurable_backend_and_module_call(caplog):
    import flashgen.compile.backend  # noqa: F401  (what the entry point imports)

    # Importing the entry point's module must not shadow the `flashgen.backend` factory.
    assert callable(flashgen.backend(fallback="eager"))
    with pytest.raises(ValueError, match="fallback"):
        backend(fallback=3)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    q, k, v = (torch.randn(1, 2, 9, 16, device=DEVICE) for _ in range(3))
    torch._dynamo.reset()
    with caplog.at_level("INFO", logger="flashgen"):
        out = torch.compile(f, backend=flashgen.backend(fallback="eager"))(q, k, v)
    torch.testing.assert_close(out, f(q, k, v), atol=1e-5, rtol=1e-5)
    lines = [r.getMessage() for r in caplog.records if r.name == "flashgen"]
    assert any("1 attention site(s) found, 1 replaced (sdpa x1), 0 skipped" in m for m in lines)


def test_rest_of_the_graph_compiles_under_a_cache_tag_naming_the_ops_revision():
    """Inductor's caches key compiled code on the graph, not on the ops' fake functions, whose
    strides that code asserts: the backend tags the cache key with flashgen's version and the
    ops' revision while the rest compiles (after the user's own tag, which it leaves in place
    and restores)."""
    from torch.compiler import config as compiler_config

    from flashgen.core.version import VERSION
    from flashgen.runtime.library import OPS_REVISION

    seen = []

    def rest(gm, example_inputs):
        seen.append(compiler_config.cache_key_tag)
        return gm.forward

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    q, k, v = (torch.randn(1, 2, 9, 16, device=DEVICE) for _ in range(3))
    ours = f"flashgen-{VERSION}-ops{OPS_REVISION}"
    for user in ("", "mine"):
        torch._dynamo.reset()
        with compiler_config.patch(cache_key_tag=user):
            torch.compile(f, backend=flashgen.backend(fallback=rest))(q, k, v)
            assert compiler_config.cache_key_tag == user
        assert seen[-1] == (f"{user}|{ours}" if user else ours)


def test_sdpa_false_keeps_pytorch_attention_and_replaces_hand_written():
    """backend(sdpa=False): SDPA sites stay PyTorch's (reported as kept), hand-written
    attention in the same graph is still replaced, and the result matches eager."""

    def f(q, k, v):
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
        return fused + torch.softmax(s, dim=-1) @ v

    q, k, v = (torch.randn(1, 2, 11, 16, device=DEVICE) for _ in range(3))
    torch._dynamo.reset()
    before = dict(patterns.counters)
    out = torch.compile(f, backend=backend(fallback="eager", sdpa=False))(q, k, v)
    torch.testing.assert_close(out, f(q, k, v), atol=1e-4, rtol=1e-4)
    delta = {key: patterns.counters[key] - before.get(key, 0) for key in patterns.counters}
    assert delta.get("sdpa.skipped") == 1 and not delta.get("sdpa.replaced")
    assert delta.get("matmul.replaced") == 1
