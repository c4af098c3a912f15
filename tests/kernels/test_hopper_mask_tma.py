"""The Hopper forward's gathered mask tiles read by the producer's TMA (MASK_TMA,
FLASHGEN_MASK_TMA=1; flashgen.kernels.hopper.mask_tma_template, templates/attn_fwd_hopper.py.jinja
`mask_tma`).

On the CPU: the descriptor template a mask gets (broadcast dims of size 1, the cases TMA cannot
read refused), the plan against the kernel's signature, the default renderings without any of
it, and the renderings compiled ahead of time for sm_90 (shared memory against the model). On an
sm_90 GPU: dense boolean and additive masks against float64, with and without TMA.
"""

from __future__ import annotations

import pytest
import torch
from gluon_aot import AOT_REASON, compile_in_child, needs_gluon, on_sm90

from flashgen.core.hopper_config import HopperConfig
from flashgen.core.spec import KernelSpec
from flashgen.kernels import codegen, hopper

H200_SMEM = 232_448  # the H200's shared memory a program may opt into
ADD = KernelSpec(128, True, "bfloat16", "fwd", attn_mask="add")
BOOL = KernelSpec(128, False, "bfloat16", "fwd", attn_mask="bool")


@pytest.fixture
def mask_tma(monkeypatch):
    """FLASHGEN_MASK_TMA=1 with fresh renderings and plans, and fresh ones again after (the
    variable is read when a process first renders a spec)."""
    from flashgen.kernels import fwd

    monkeypatch.setenv(hopper.MASK_TMA_ENV, "1")
    codegen._load.cache_clear()
    fwd._plans.clear()
    yield
    monkeypatch.delenv(hopper.MASK_TMA_ENV)
    codegen._load.cache_clear()
    fwd._plans.clear()


def test_rendered_only_when_asked_and_without_lengths(monkeypatch):
    monkeypatch.delenv(hopper.MASK_TMA_ENV, raising=False)
    assert not hopper.mask_tma_rendered(ADD)
    monkeypatch.setenv(hopper.MASK_TMA_ENV, "1")
    assert hopper.mask_tma_rendered(ADD) and hopper.mask_tma_rendered(BOOL)
    assert not hopper.mask_tma_rendered(KernelSpec(128, True, "bfloat16", "fwd"))
    padded = KernelSpec(128, False, "bfloat16", "fwd", lengths=True, attn_mask="bool")
    assert not hopper.mask_tma_rendered(padded)  # a key-padding mask: one vector of keys


@needs_gluon
def test_default_rendering_has_none_of_it(monkeypatch):
    monkeypatch.delenv(hopper.MASK_TMA_ENV, raising=False)
    source = codegen.render(ADD, "hopper")
    assert "MASK_TMA_RENDERED = False" in source
    code = "\n".join(line for line in source.splitlines() if not line.startswith("#"))
    assert "desc_mask" not in code and "_load_mask" not in code
    assert "o_bufs = gl.allocate_shared_memory" in source  # O keeps its own buffers


@needs_gluon
def test_rendering_with_it(mask_tma):
    source = codegen.render(ADD, "hopper")
    assert "MASK_TMA_RENDERED = True" in source
    assert "    desc_mask,\n" in source and "    MASK_TMA: gl.constexpr,\n" in source
    assert (
        "tm = mask_bufs.index(mslot).reshape([qk.shape[0], BLOCK_N]).load(col_layout.parent)"
        in source
    )
    # O staged in the Q buffers: the mask tiles take the O buffers' shared memory
    assert "o_bufs = q_bufs" in source
    # the producer loads each consumer's tile, the consumers wait, arrive, and skip
    assert source.count("_load_mask(desc_mask,") == 1
    assert source.count("_skip_mask(mask_ready, mask_empty, t + j") == 2
    assert source.count("mbarrier.arrive(mask_empty.index(mslot))") == 2


def _found(mask, cfg=None, smem=H200_SMEM, spec=ADD):
    return hopper.mask_tma_template(spec, cfg or hopper.CONFIGS[128], mask, smem)


def _template(mask, cfg=None, smem=H200_SMEM, spec=ADD):
    found = _found(mask, cfg, smem, spec)
    return None if found is None else found[1]


@needs_gluon
def test_descriptor_template_of_broadcast_masks():
    """Broadcast dims (stride 0 or size 1) become size 1 with a 16-byte-multiple stride; the
    block is one consumer's rows of a key tile; the layout is Gluon's default for the dtype."""
    from triton.experimental.gluon import language as gl

    cfg = hopper.CONFIGS[128]
    bias = torch.zeros(1, 16, 256, 512, dtype=torch.bfloat16).expand(4, 16, 256, 512)
    shape, strides, block, layout = _template(bias)
    assert shape == [1, 16, 256, 512] and strides == [16 * 256 * 512, 256 * 512, 512, 1]
    assert block == [1, 1, cfg.block_m // cfg.consumers, cfg.block_n]
    assert layout == gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    hf = torch.ones(2, 1, 300, 304, dtype=torch.bool).expand(2, 8, 300, 304)
    shape, strides, block, layout = _template(hf, spec=BOOL)
    assert shape == [2, 1, 300, 304] and strides == [300 * 304, 300 * 304, 304, 1]
    assert layout == gl.NVMMASharedLayout.get_default_for(block, gl.uint8)
    assert hopper.mask_tma_arg(hf, 2).dtype == torch.uint8
    assert hopper.mask_tma_arg(hf, 0) is hf


@needs_gluon
def test_two_mask_buffers_where_they_fit():
    """Two buffers a consumer where shared memory holds them (the next tile's copy lands while
    the softmax reads this one), else one: at head dim 128 a boolean mask's tiles fit twice,
    a 16-bit mask's once (O's buffers make room for one); at head dim 64 both fit twice."""
    cfg128, cfg64 = hopper.CONFIGS[128], hopper.CONFIGS[64]
    d64 = KernelSpec(64, False, "bfloat16", "fwd", attn_mask="bool")
    hf = torch.ones(2, 1, 256, 512, dtype=torch.bool)
    bias = torch.zeros(1, 4, 256, 512, dtype=torch.bfloat16)
    assert _found(hf, spec=BOOL)[0] == 2 and _found(bias)[0] == 1
    assert _found(hf, cfg64, spec=d64)[0] == 2 and _found(bias, cfg64, spec=d64)[0] == 2
    for cfg, spec, mask in ((cfg128, BOOL, hf), (cfg128, ADD, bias), (cfg64, d64, bias)):
        n = _found(mask, cfg, spec=spec)[0]
        need = cfg.shared_bytes(spec.head_dim, mask_elem=mask.element_size(), mask_bufs=n)
        assert need <= H200_SMEM


@needs_gluon
def test_descriptor_template_refusals():
    """None (the gathered loads) where TMA cannot read the mask or its tiles do not fit."""
    per_key = torch.zeros(2, 1, 1, 512, dtype=torch.bool).expand(2, 8, 300, 512)
    assert _template(per_key, spec=BOOL) is None
    odd = torch.zeros(1, 1, 300, 301, dtype=torch.bfloat16)  # 602-byte rows
    assert _template(odd) is None
    strided = torch.zeros(1, 1, 256, 1024, dtype=torch.bfloat16)[..., ::2]
    assert _template(strided) is None
    unaligned = torch.zeros(1, 1, 256 * 512 + 1, dtype=torch.bfloat16)[..., 1:]
    assert _template(unaligned.view(1, 1, 256, 512)) is None
    assert _template(torch.zeros(1, 1, 256, 512, dtype=torch.int32)) is None
    # fp32 tiles at head dim 128 take 64 KB: past the H200's shared memory; at 64 they fit
    f32 = torch.zeros(1, 1, 256, 512)
    assert _template(f32) is None
    d64 = KernelSpec(64, True, "bfloat16", "fwd", attn_mask="add")
    assert _found(f32, hopper.CONFIGS[64], spec=d64) is not None
    bf16 = torch.zeros(1, 1, 256, 512, dtype=torch.bfloat16)
    assert _template(bf16, smem=200_000) is None
    # ALiBi's key-index tables beside the mask tiles: 234,176 bytes by the model at head dim 128
    alibi = KernelSpec(128, True, "bfloat16", "fwd", attn_mask="add", alibi=True)
    assert _template(bf16, spec=alibi) is None and _template(bf16) is not None


def test_shared_bytes_model_with_mask_tiles():
    """O staged in the Q buffers (two Q tiles a consumer, not three tiles) plus one mask tile
    a consumer and its two mbarriers."""
    cfg = HopperConfig(128, 128, 2, 2, 4, 168, False, True)
    plain = cfg.shared_bytes(128)
    o_tiles = 128 * 128 * 2
    assert cfg.shared_bytes(128, mask_elem=2) == plain - o_tiles + 128 * 128 * 2 + 8 * 2 * 2
    assert cfg.shared_bytes(128, mask_elem=1) == plain - o_tiles + 128 * 128 + 8 * 2 * 2
    assert cfg.shared_bytes(128, mask_elem=1, mask_bufs=2) == (
        plain - o_tiles + 2 * (128 * 128 + 8 * 2 * 2)
    )


@needs_gluon
@pytest.mark.parametrize("tma", [True, False], ids=["tma", "gathered"])
def test_plan_matches_the_kernel_signature(tma, mask_tma, monkeypatch):
    """desc_mask comes last before the constexprs: a fifth descriptor with the template the
    plan was given (MASK_TMA on), or the mask itself as a placeholder (off)."""
    monkeypatch.setattr(hopper, "sched_counter", lambda device: torch.zeros(1, dtype=torch.int32))
    monkeypatch.setattr(hopper, "_sm_count", lambda index: 132)
    q = torch.zeros(2, 4, 256, 128, dtype=torch.bfloat16)
    k = v = torch.zeros(2, 2, 256, 128, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    mask = torch.zeros(1, 4, 256, 256, dtype=torch.bfloat16).expand(2, 4, 256, 256)
    cfg = hopper.CONFIGS[128]
    bufs, desc = _found(mask) if tma else (0, None)
    assert bufs == (1 if tma else 0)
    run = hopper.plan(ADD, cfg, q, k, v, out, None, mask_tma=(bufs, desc))
    lse = torch.empty(2, 4, 256)
    args = hopper.call_args(ADD, q, k, v, out, lse, 0.1, None, None, None, mask, None, None,
                            bufs)  # fmt: skip
    names = run.kernel.arg_names
    assert names[len(args) - 1] == "desc_mask"
    assert list(names[len(args) :]) == list(run.constexprs)
    assert run.constexprs["MASK_TMA"] == bufs and run.constexprs["MASK_PER_KEY"] is False
    assert args[-1] is mask  # (an additive mask travels as itself either way)
    if tma:
        assert run.descs.positions == (0, 1, 2, 3, len(args) - 1)
        assert run.descs.templates[4] == desc
    else:
        assert run.descs.positions == (0, 1, 2, 3)


_AOT = """
import json, os, sys
os.environ["FLASHGEN_MASK_TMA"] = "1"
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_aot
from flashgen.kernels.hopper import CONFIGS, for_spec
out = {}
for uri, dtype, bufs in json.loads(sys.argv[1]):
    spec = KernelSpec.from_uri(uri)
    cfg = for_spec(CONFIGS[spec.head_dim], spec)
    res = hopper_aot.compile_for_sm90(spec, cfg, mask_dtype=dtype, mask_bufs=bufs)
    ptx = res["ptx"]
    out[f"{uri}:{dtype}"] = dict(shared=res["shared"], wgmma="wgmma.mma_async" in ptx,
                                 tma=ptx.count("cp.async.bulk.tensor"), gathered="ld.global" in ptx)
print(json.dumps(out))
"""


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_compiles_for_sm90_and_fits():
    """bf16 additive and boolean masks at head dims 128 and 64, causal both ways, compiled for
    sm_90 with the shipped configs: with MASK_TMA the shared memory is the model's (plus the
    compiler's alignment padding) and within the H200's, no mask load is a global one, and
    the producer issues more TMA copies than without it; without it (the same rendering) the
    consumers gather from global memory."""
    specs = [KernelSpec(128, True, "bfloat16", "fwd", attn_mask="add"),
             KernelSpec(128, False, "bfloat16", "fwd", attn_mask="bool"),
             KernelSpec(64, True, "float16", "fwd", attn_mask="bool")]  # fmt: skip
    # the buffers a consumer the plan takes (`test_two_mask_buffers_where_they_fit`)
    cases = [(s.uri(), "bfloat16" if s.attn_mask == "add" else "bool",
              1 if s.attn_mask == "add" and s.head_dim == 128 else 2) for s in specs]  # fmt: skip
    cases += [(s.uri(), None, 1) for s in specs]
    results = compile_in_child(_AOT, cases)
    for spec, (uri, dtype, bufs) in zip([*specs, *specs], cases, strict=True):
        got = results[f"{uri}:{dtype}"]
        assert got["wgmma"], uri
        if dtype is None:
            assert got["gathered"], uri
            continue
        assert got["tma"] > results[f"{uri}:None"]["tma"], (uri, got)
        elem = 2 if dtype == "bfloat16" else 1
        model = hopper.CONFIGS[spec.head_dim].shared_bytes(spec.head_dim, mask_elem=elem,
                                                           mask_bufs=bufs)  # fmt: skip
        assert model <= got["shared"] < model + 1024 and got["shared"] <= H200_SMEM, (uri, got)
        assert not got["gathered"], uri


# ---- the GPU: dense masks against float64 ------------------------------------------------

CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, dtype, causal, mask kind, mask shape)
    (2, 4, 2, 1000, 1024, 128, torch.bfloat16, False, "bool", "b1nn"),  # HF's 4-D mask
    (2, 4, 4, 1024, 1024, 128, torch.bfloat16, True, "add", "1hnn"),  # T5-like bias
    (1, 8, 2, 777, 784, 128, torch.float16, False, "add", "bhnn"),
    (2, 4, 4, 1000, 1003, 128, torch.bfloat16, False, "bool", "b1nn"),  # odd keys: gathered
    (2, 4, 2, 1024, 1024, 64, torch.bfloat16, True, "bool", "b1nn"),
    (1, 4, 4, 512, 512, 64, torch.bfloat16, False, "add", "f32"),  # fp32 bias at head dim 64
]


def _dense(case, gen):
    b, hq, hkv, sq, sk, d, dtype, causal, kind, shape = case
    dims = {"b1nn": (b, 1, sq, sk), "1hnn": (1, hq, sq, sk), "bhnn": (b, hq, sq, sk),
            "f32": (b, hq, sq, sk)}[shape]  # fmt: skip
    if kind == "bool":
        lens = torch.randint(sk // 2, sk + 1, (b,), generator=gen)
        mask = torch.arange(sk)[None, :] < lens[:, None]
        mask = mask[:, None, None, :] & torch.rand(dims, generator=gen).gt(0.2)
        mask[..., 0] = True  # every row sees a key (rows seeing none are the padding tests')
        return mask.cuda().expand(b, hq, sq, sk)
    bias = torch.randn(dims, generator=gen).to(torch.float32 if shape == "f32" else dtype)
    return bias.cuda().expand(b, hq, sq, sk)


@on_sm90
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[8]}_{c[9]}_{c[3]}x{c[4]}_d{c[5]}"
                         f"{'_causal' if c[7] else ''}")  # fmt: skip
def test_dense_masks_match_float64(case, persistent, mask_tma, monkeypatch):
    from flashgen.kernels.fwd import forward

    b, hq, hkv, sq, sk, d, dtype, causal, kind, shape = case
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    if persistent:  # several work items a program: the mask ring runs on across items
        cfg = hopper.CONFIGS[d].with_persistent(True)
        monkeypatch.setattr(hopper, "config_for", lambda spec, sq, narrow=False: cfg)
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(b, h, s, d, generator=gen).to(dtype).cuda()
               for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))  # fmt: skip
    mask = _dense(case, gen)
    spec = KernelSpec(d, causal, str(dtype).removeprefix("torch."), "fwd", attn_mask=kind)
    assert hopper.choose(spec, q, k, v, sq)
    out, lse = forward(q, k, v, causal=causal, scale=None, mask=mask)
    g = hq // hkv
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) / d**0.5
    s = s + mask.double() if kind == "add" else s.masked_fill(~mask, float("-inf"))
    if causal:
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool, device="cuda").triu(1),
                          float("-inf"))  # fmt: skip
    ref = torch.softmax(s, -1) @ vd
    err = (out.double() - ref).abs().max().item()
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert err <= tol * max(1.0, ref.abs().max().item()), err
    lse_err = (lse.double() - torch.logsumexp(s, -1)).abs().max().item()
    assert lse_err <= 1e-3 * max(1.0, torch.logsumexp(s, -1).abs().max().item()), lse_err
    # which path the plan took: TMA where the mask allows it (odd keys: gathered)
    from flashgen.kernels import fwd

    (plan,) = [p for p in fwd._plans.values() if getattr(p, "hopper", None) is not None]
    assert bool(plan.tma_mask) == ((sk * mask.element_size()) % 16 == 0), plan.tma_mask
