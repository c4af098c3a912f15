"""The Hopper backward kind (flashgen.kernels.hopper_bwd, templates/attn_bwd_hopper.py.jinja).

Gluon kernels do not run in Triton's CPU interpreter, so on the CPU this renders the template,
checks how the kind is chosen and compiles the kernel ahead of time for sm_90 (layouts, types,
shared memory against the model, register spills reported by ptxas); numerics are checked on an
sm_90 GPU (`gpu`) against float64: GQA, causal both ways, odd lengths, fp16 and bf16.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from gluon_aot import AOT_REASON, check_kernel_cli, compile_in_child, needs_gluon, on_sm90

from flashgen.core.config import FieldError
from flashgen.core.spec import KernelSpec
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.bwd_kind import DEFAULT_KIND, resolve_kind
from flashgen.kernels.codegen import render


@needs_gluon
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", hopper_bwd.RENDERABLE_HEAD_DIMS, ids=lambda d: f"d{d}")
def test_render(head_dim, dtype, causal):
    spec = KernelSpec(head_dim, causal, dtype, "bwd")
    source = render(spec, hopper_bwd.FAMILY)
    assert f"# Kernel: {hopper_bwd.family_uri(spec)}\n" in source
    assert f"HEAD_DIM = gl.constexpr({head_dim})" in source
    assert f"dtype: gl.constexpr = gl.{dtype}" in source
    # The causal mask and the longest-first block order exist only in the causal rendering.
    assert ("offs_m[None, :] >= offs_n[:, None]" in source) == causal
    assert ("pid_n = r // heads_here" in source) == causal
    compile(source, spec.uri(), "exec")


@needs_gluon
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_render_window(causal):
    """A window replaces the causal walk: both band edges masked, no longest-first order (every
    key block has about as many steps), the sizes as run-time arguments after sm_scale."""
    spec = KernelSpec(128, causal, "bfloat16", "bwd", window=True)
    source = render(spec, hopper_bwd.FAMILY)
    assert "offs_n[:, None] >= offs_m[None, :] - win_left" in source
    assert "offs_m[None, :] >= offs_n[:, None]" not in source
    assert "pid_n = r // heads_here" not in source
    assert "    sm_scale,\n    WIN_LEFT, WIN_RIGHT,\n" in source
    assert '"WIN_LEFT", "WIN_RIGHT"]' in source  # not specialised per size
    compile(source, spec.uri(), "exec")
    plain = render(KernelSpec(128, causal, "bfloat16", "bwd"), hopper_bwd.FAMILY)
    assert "win_left" not in plain and "    WIN_LEFT, WIN_RIGHT,\n" not in plain
    assert "_tanh(" not in plain and "s = s + slope" not in plain


@needs_gluon
def test_render_softcap_and_alibi():
    """Softcapping and ALiBi: the tanh's derivative taken into dS, the slope term after the
    cap, their arguments after the window's in the template's order."""
    spec = KernelSpec(64, True, "float16", "bwd", window=True, softcap=True, alibi=True)
    source = render(spec, hopper_bwd.FAMILY)
    assert "tanh.approx.f32" in source
    assert "p_ds = p * (1.0 - tanh_s * tanh_s)" in source and "ds = p_ds * (dp" in source
    assert source.index("s = cap * tanh_s") < source.index("s = s + slope *")
    assert "    WIN_LEFT, WIN_RIGHT,\n    softcap_raw,\n    Slopes, stride_sb,\n" in source
    compile(source, spec.uri(), "exec")


@pytest.mark.parametrize(
    "spec, fragment",
    [
        (KernelSpec(96, False, "bfloat16", "bwd"), "head dim 96"),
        (KernelSpec(128, False, "float32", "bwd"), "dtype float32"),
        (KernelSpec(128, False, "float16", "fwd"), "backward specs"),
        (KernelSpec(64, True, "float16", "bwd", dropout=True, softcap=True), "split backward only"),
        (KernelSpec(64, False, "float16", "bwd", alibi=True, lengths=True), "split backward only"),
    ],
)
def test_specs_without_a_kernel(spec, fragment):
    assert fragment in hopper_bwd.spec_reason(spec)
    with pytest.raises((ValueError, RuntimeError)):
        render(spec, hopper_bwd.FAMILY)


def test_kind_is_opt_in_and_never_deterministic(monkeypatch):
    monkeypatch.delenv("FLASHGEN_BWD_KIND", raising=False)
    plain = KernelSpec(128, True, "bfloat16", "bwd")
    assert resolve_kind(False, None, plain) == DEFAULT_KIND != "hopper"
    assert resolve_kind(False, "hopper", plain) == "hopper"
    with pytest.raises(ValueError, match="not deterministic"):
        resolve_kind(True, "hopper", plain)
    with pytest.raises(ValueError, match="no kernel for"):
        resolve_kind(False, "hopper", KernelSpec(96, True, "bfloat16", "bwd"))
    monkeypatch.setenv("FLASHGEN_BWD_KIND", "hopper")
    assert resolve_kind(False, None, plain) == "hopper"
    assert resolve_kind(True, None, plain) == "split"  # the env var is a preference only
    assert resolve_kind(False, None, KernelSpec(96, True, "bfloat16", "bwd")) == "split"


def test_auto_choice_only_where_listed(monkeypatch):
    """A call that leaves the kind open takes the hopper kind only for the (head dim, causal,
    key length) `AUTO` lists, never under determinism or an explicit kind."""
    monkeypatch.setattr(hopper_bwd, "AUTO", {(128, False): 2048})
    assert hopper_bwd.auto_choice(KernelSpec(128, False, "bfloat16", "bwd"), 4096)
    assert not hopper_bwd.auto_choice(KernelSpec(128, False, "bfloat16", "bwd"), 1024)
    assert not hopper_bwd.auto_choice(KernelSpec(128, True, "bfloat16", "bwd"), 4096)
    assert not hopper_bwd.auto_choice(KernelSpec(128, False, "float32", "bwd"), 4096)
    ran = []
    real = bwd._hopper
    monkeypatch.setattr(bwd, "_hopper", lambda *a: ran.append(a) or real(*a))
    monkeypatch.setattr(hopper_bwd, "AUTO", {(64, False): 1})
    monkeypatch.delenv("FLASHGEN_BWD_KIND", raising=False)
    q, k, v, do = (torch.randn(1, 2, 33, 64).half() for _ in range(4))
    from flashgen.kernels.fwd import forward

    out, lse = forward(q, k, v, causal=False, scale=None)
    bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125)
    assert len(ran) == 1  # tried (and on CPU tensors fell back to split)
    bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, deterministic=True)
    bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, kind="split")
    assert len(ran) == 1


def test_auto_grouped_takes_gqa_calls_only(monkeypatch):
    """`AUTO_GROUPED` overrides `AUTO` for calls with more query heads than kv heads (the
    backward passes the group down), and only for the (head dim, causal) it lists."""
    monkeypatch.setattr(hopper_bwd, "AUTO", {(128, True): 4096})
    monkeypatch.setattr(hopper_bwd, "AUTO_GROUPED", {(128, True): 1024})
    causal = KernelSpec(128, True, "bfloat16", "bwd")
    assert not hopper_bwd.auto_choice(causal, 1024)
    assert hopper_bwd.auto_choice(causal, 1024, group=4)
    assert not hopper_bwd.auto_choice(causal, 1023, group=4)
    assert not hopper_bwd.auto_choice(KernelSpec(128, False, "bfloat16", "bwd"), 4096, group=4)
    assert hopper_bwd.auto_possible(1024) and not hopper_bwd.auto_possible(1023)
    ran = []
    real = bwd._hopper
    monkeypatch.setattr(bwd, "_hopper", lambda *a: ran.append(a) or real(*a))
    monkeypatch.setattr(hopper_bwd, "AUTO", {})
    monkeypatch.setattr(hopper_bwd, "AUTO_GROUPED", {(64, False): 1})
    monkeypatch.delenv("FLASHGEN_BWD_KIND", raising=False)
    from flashgen.kernels.fwd import forward

    for hq, hkv, taken in ((2, 2, 0), (4, 2, 1)):
        q, do = (torch.randn(1, hq, 33, 64).half() for _ in range(2))
        k, v = (torch.randn(1, hkv, 33, 64).half() for _ in range(2))
        out, lse = forward(q, k, v, causal=False, scale=None)
        ran.clear()
        bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125)
        assert len(ran) == taken  # tried where GQA (and on CPU tensors fell back to split)


def test_cpu_tensors_fall_back_to_split(monkeypatch):
    """kind="hopper" on tensors it cannot run (here: CPU, the interpreter) gives the split
    kind's gradients, not an error."""
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(1, 2, 33, 64, generator=gen) for _ in range(4))
    spec = KernelSpec(64, False, "float32", "bwd")
    assert hopper_bwd.spec_reason(spec) is not None
    spec16 = KernelSpec(64, False, "float16", "bwd")
    assert hopper_bwd.usable(spec16, q.half(), k.half(), v.half(), do.half()) is not None
    from flashgen.kernels.fwd import forward

    q16, k16, v16, do16 = (t.half() for t in (q, k, v, do))
    out, lse = forward(q16, k16, v16, causal=False, scale=None)
    got = bwd.backward(do16, q16, k16, v16, out, lse, causal=False, scale=0.125, kind="hopper")
    want = bwd.backward(do16, q16, k16, v16, out, lse, causal=False, scale=0.125, kind="split")
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_kernel_cli_prints_the_source(capsys):
    refused = ["--head-dim", "128", "--family", "hopper_bwd"]
    printed = ["--head-dim", "64", "--direction", "bwd", "--causal", "--family", "hopper_bwd"]
    check_kernel_cli(capsys, refused, "backward specs", printed, "attn_bwd_ws")


def test_stats_tma_is_refused():
    """stats_tma compiles but faulted on the H200 (RESULTS.md): the launcher refuses it."""
    cfg = hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, True)
    q = torch.zeros(1, 1, 64, 128, dtype=torch.bfloat16)
    spec = KernelSpec(128, False, "bfloat16", "bwd")
    with pytest.raises(ValueError, match="stats_tma"):
        hopper_bwd.backward(q, q, q, q, q, q[..., 0].float(), scale=1.0, spec=spec, config=cfg)


def test_config_refused_for_a_head_dim_it_cannot_split():
    """c2-own-dq (two consumers, each adding all of dQ in two column chunks) needs 128 dQ
    columns: at head dim 64 the launcher refuses it with the reason instead of launching (S6B1
    ran it there through the GPU test, which now runs each config on the head dims it takes)."""
    cfg = hopper_bwd.HopperBwdConfig(2, 2, 2, 168, False, False)
    assert cfg.head_dim_reason(128) is None
    assert "64-column chunks" in cfg.head_dim_reason(64)
    q = torch.zeros(1, 1, 64, 64, dtype=torch.bfloat16)
    spec = KernelSpec(64, False, "bfloat16", "bwd")
    with pytest.raises(ValueError, match="cannot run head dim 64: dq_split 2"):
        hopper_bwd.backward(q, q, q, q, q, q[..., 0].float(), scale=1.0, spec=spec, config=cfg)


def test_config_validation():
    assert hopper_bwd.HopperBwdConfig(2, 2, 2, 168).block_n == 128
    assert hopper_bwd.HopperBwdConfig(2, 2, 2, 168, True).head_dim_reason(128) is not None
    assert hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True).head_dim_reason(64) is None
    bad = (
        (3, 2, 1, 168),
        (2, 5, 1, 168),
        (2, 2, 3, 168),
        (2, 2, 1, 248),
        (1, 2, 1, 20),
        (1, 2, 1, 248, True),
    )
    for fields in bad:
        with pytest.raises(FieldError):
            hopper_bwd.HopperBwdConfig(*fields)
    with pytest.raises(FieldError):
        hopper_bwd.HopperBwdConfig(2, 2, True, 168)
    with pytest.raises(FieldError, match="dq_turns"):  # turns at computing a shared dS's dQ
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, False, dq_turns=True)
    with pytest.raises(FieldError, match="stats_smem"):  # one way of staging the statistics
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, True, stats_smem=True)
    staged = hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, stats_smem=True)
    plain = dataclasses.replace(staged, stats_smem=False)
    assert staged.shared_bytes(128) - plain.shared_bytes(128) == 2 * 2 * 2 * 64 * 4
    assert staged.short().endswith(" sm)") and " sm" not in plain.short()
    with pytest.raises(FieldError, match="ds_bufs"):  # a dS exchange needs shared dS
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, False, ds_bufs=2)
    with pytest.raises(FieldError, match="ds_bufs"):
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, ds_bufs=3)
    with pytest.raises(FieldError, match="dynamic"):  # a dynamic grid is a persistent one
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, dynamic=True)
    drawn = hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, persistent=True, dynamic=True)
    static = dataclasses.replace(drawn, dynamic=False)
    assert drawn.short().endswith(" dyn)") and drawn.shared_bytes(64) == static.shared_bytes(64) + 4
    ring = dataclasses.replace(staged, ds_bufs=2)
    assert ring.shared_bytes(128) - staged.shared_bytes(128) == 64 * 128 * 2 + 2 * 8
    assert ring.short().endswith(" ds2)")
    with pytest.raises(FieldError, match="dq_bufs"):  # two staging buffers need dQ by TMA
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, dq_bufs=2)
    with pytest.raises(FieldError, match="dq_bufs"):  # ... taken by step, not in turns
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, dq_tma=True, dq_turns=True, dq_bufs=2)
    two = dataclasses.replace(staged, dq_tma=True, dq_bufs=2)
    one = dataclasses.replace(two, dq_bufs=1)
    assert two.shared_bytes(128) - one.shared_bytes(128) == 2 * 64 * 64 * 4  # a chunk a consumer
    assert two.short().endswith(" dq2)")
    with pytest.raises(FieldError, match="dq_first"):  # dQ's product first: one chunk
        hopper_bwd.HopperBwdConfig(2, 2, 2, 168, True, dq_first=True)
    with pytest.raises(FieldError, match="dq_first"):  # ... and not in turns
        hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, dq_turns=True, dq_first=True)
    first = dataclasses.replace(two, dq_first=True)
    assert first.short().endswith(" dq2 dqf)") and first.shared_bytes(128) == two.shared_bytes(128)


# ---- ahead-of-time compilation for sm_90 (CPU) -------------------------------------------

AOT_CASES = [
    (128, False, "shipped"),
    (128, True, "shipped"),
    (128, True, "short"),  # SHORT_MHA_CONFIGS' entry
    (128, False, "short"),  # SHORT_CONFIGS' entry
    (64, True, "shipped"),
    (64, False, "shipped"),
    (128, True, (1, 3, 2, 248)),
    (128, False, (2, 2, 2, 168, False)),
    (64, False, (2, 3, 1, 168, False, True)),
    (128, True, (2, 2, 1, 168, True, True, True, 2)),
    (128, False, (2, 3, 1, 168, True, False, False, 1, 64, True, True)),
    (64, False, (1, 3, 1, 248, False, False, True, 2, 64, False, True)),
    (64, True, (2, 2, 1, 168, True, False, False, 1, 64, True, True, True, 2)),
    (128, False, (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 2)),
    (128, True, (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 1, True)),
    (64, False, (2, 2, 1, 168, True, False, True, 2, 64, True, True, False, 2, True)),
    (128, True, (2, 2, 1, 168, True, False, False, 1, 64, True, True, False, 2, False, 2)),
    (64, False, (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 1, False, 2)),
    (64, False, (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 1, False, 1, True)),
    (128, False, (2, 2, 1, 168, True, False, False, 1, 64, False, True, False, 1, False, 1, True)),
    (128, False, (2, 2, 1, 168, True, False, True, 1, 64, True, True, True, 1)),
    (128, True, (2, 2, 1, 168, True, False, False, 1, 64, True, True, False, 2, False, 1, True)),
    (128, False, (2, 2, 2, 168, False, False, False, 1, 64, True, True)),
]

_AOT_SCRIPT = """
import json, sys
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper, hopper_bwd
out = {}
for d, causal, cfg in json.loads(sys.argv[1]):
    spec = KernelSpec(d, causal, "bfloat16", "bwd")
    if cfg in ("shipped", "short"):  # "short": an MHA call of 1k keys
        cfg = hopper_bwd.shipped_config(spec, 1024 if cfg == "short" else None)
    else:
        cfg = hopper_bwd.HopperBwdConfig(*cfg)
    res = hopper_bwd.compile_for_sm90(spec, cfg)
    out[f"d{d} {causal} {cfg.short()}"] = dict(shared=res["shared"], model=cfg.shared_bytes(d),
                                               ptx=res["ptx"])
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_compiles_for_sm90_and_fits_the_model():
    """In a child process (`gluon_aot.compile_in_child`)."""
    import re

    from flashgen.hardware.sram import KNOWN_GPUS

    results = compile_in_child(_AOT_SCRIPT, AOT_CASES)
    assert len(results) == len(AOT_CASES)
    for name, result in results.items():
        ptx = result["ptx"]
        assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+(24|40);", ptx), name
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, name
        if " tma" in name:  # dQ partials by TMA reduce-add, or by element atomics
            assert "cp.reduce.async.bulk.tensor" in ptx, name
        else:
            assert re.search(r"(atom|red)\.global\.gpu\.relaxed\.add", ptx), name
        # a dynamic grid draws tickets and its last holder resets the counter; static, none
        assert bool(re.search(r"atom\.global\.[a-z0-9_.]*exch", ptx)) == (" dyn" in name), name
        real, model = result["shared"], result["model"]
        assert model <= real < model + 1024, (name, real, model)
        assert real <= KNOWN_GPUS["nvidia-h200"].smem_optin_bytes


_AOT_DKDV_SCRIPT = """
import json, sys
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_bwd
out = {}
for d, causal in json.loads(sys.argv[1]):
    cfg = hopper_bwd.DKDV_CONFIG
    res = hopper_bwd.compile_for_sm90(KernelSpec(d, causal, "bfloat16", "bwd"), cfg,
                                      compute_dq=False)
    out[f"d{d} {causal}"] = dict(shared=res["shared"], ptx=res["ptx"],
                                 model=cfg.shared_bytes(d, compute_dq=False))
json.dump(out, sys.stdout)
"""


def _check_without_atomics(results, n: int, fragments: tuple[str, ...]) -> None:
    """What the AOT tests of kernels without element atomics share: one result a case, the
    PTX fragments present, no atomic add, shared memory as the model says (within 1 KB)."""
    import re

    assert len(results) == n
    for name, result in results.items():
        ptx = result["ptx"]
        assert all(fragment in ptx for fragment in fragments), name
        assert not re.search(r"(atom|red)\.global\.[a-z.]*add", ptx), name
        assert result["model"] <= result["shared"] < result["model"] + 1024, (name, result)


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_dkdv_kernel_compiles_for_sm90_without_atomics():
    """COMPUTE_DQ=False (the split kind's dK/dV kernel): no atomics, no dS buffer, wgmma and
    TMA as in the full kernel; shared memory as the model without dS says."""
    cases = [(128, False), (64, True)]
    results = compile_in_child(_AOT_DKDV_SCRIPT, cases)
    _check_without_atomics(results, len(cases), ("wgmma.mma_async", "cp.async.bulk.tensor"))


_AOT_TMA_SCRIPT = """
import json, sys
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_bwd
out = {}
for d, causal, fields in json.loads(sys.argv[1]):
    cfg = hopper_bwd.HopperBwdConfig(*fields, dq_tma=True)
    res = hopper_bwd.compile_for_sm90(KernelSpec(d, causal, "bfloat16", "bwd"), cfg)
    out[f"d{d} {causal} {cfg.short()}"] = dict(shared=res["shared"], ptx=res["ptx"],
                                               model=cfg.shared_bytes(d))
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_dq_by_tma_reduce_compiles_for_sm90():
    """dq_tma: the dQ partials leave through shared memory and TMA reduce-adds (one per dQ
    chunk in the step's code), no element atomics; shared memory as the model says (the
    staging chunks included)."""
    import re

    from flashgen.kernels.gluon_reduce import reduce_name

    assert reduce_name() is not None  # CI's Triton (and the H200's 3.6) can issue it
    cases = [(128, False, (2, 2, 1, 168, True)), (64, True, (2, 2, 1, 168, False))]
    results = compile_in_child(_AOT_TMA_SCRIPT, cases)
    assert len(results) == len(cases)
    for name, result in results.items():
        ptx = result["ptx"]
        assert re.search(r"cp\.reduce\.async\.bulk\.tensor\.3d\.global\.shared::cta\.add", ptx), (
            name
        )
        assert "cp.async.bulk.wait_group.read" in ptx, name
        assert not re.search(r"(atom|red)\.global\.[a-z.]*add", ptx), name
        assert result["model"] <= result["shared"] < result["model"] + 1024, (name, result)


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
@needs_gluon
def test_dq_stage_layout_swizzle_default_and_env(monkeypatch):
    """The dQ staging tile's swizzle: 32 bytes at head dim 64 and 128 at 128 (DQ_SWIZZLE, as
    measured), unless FLASHGEN_BWD_DQ_SWIZZLE says (its A/B); anything else is refused with
    the variable's name."""
    from triton.experimental.gluon import language as gl

    monkeypatch.delenv(hopper_bwd.DQ_SWIZZLE_ENV, raising=False)
    layout = hopper_bwd.dq_stage_layout(gl, [1, 64, 64], 64)
    assert layout.swizzle_byte_width == 32
    assert layout.element_bitwidth == 32 and layout.rank == 3
    assert hopper_bwd.dq_stage_layout(gl, [1, 64, 64], 128).swizzle_byte_width == 128
    monkeypatch.setenv(hopper_bwd.DQ_SWIZZLE_ENV, "128")
    assert hopper_bwd.dq_stage_layout(gl, [1, 64, 64], 64).swizzle_byte_width == 128
    monkeypatch.setenv(hopper_bwd.DQ_SWIZZLE_ENV, "32")
    assert hopper_bwd.dq_stage_layout(gl, [1, 64, 64], 128).swizzle_byte_width == 32
    monkeypatch.setenv(hopper_bwd.DQ_SWIZZLE_ENV, "64")
    with pytest.raises(ValueError, match=hopper_bwd.DQ_SWIZZLE_ENV):
        hopper_bwd.dq_stage_layout(gl, [1, 64, 64], 64)


def test_dq_turns_gives_both_consumers_the_dq_products(monkeypatch):
    """At head dim 64 with shared dS one consumer's dQ product covers every column: without
    dq_turns only consumer 0's code has it (one dQ product chain, one reduce-add), with it
    both consumers' code does (they take the steps in turns). At head dim 128 both consumers
    have a dQ chain either way, but in turns its product covers all 128 columns (64x128
    wgmmas) where without turns each consumer's covers its 64 (64x64).
    (The staging tile's swizzle fixed at 128 bytes for both head dims: one TMA instruction a
    chunk, `hopper_bwd.dq_stage_layout`.)"""
    import re

    monkeypatch.setenv(hopper_bwd.DQ_SWIZZLE_ENV, "128")

    shipped = (2, 2, 1, 168, True, False, False, 1, 64, True, True)
    cases = [(64, False, shipped), (64, False, (*shipped, True)), (128, False, shipped),
             (128, False, (*shipped, True))]  # fmt: skip
    results = list(compile_in_child(_AOT_SCRIPT, cases).values())
    assert len(results) == 4

    def counts(ptx):
        reduces = len(re.findall(r"cp\.reduce\.async\.bulk\.tensor", ptx))
        return reduces, ptx.count("wgmma.mma_async"), ptx.count("m64n128k16")

    alone, turns, halves, whole = (counts(r["ptx"]) for r in results)
    assert alone[0] == 1 and turns[0] == 2, (alone, turns)
    assert turns[1] > alone[1]  # consumer 1's dQ product chain
    assert halves[0] == whole[0] == 2  # head dim 128: both consumers reduce-add, either way
    assert whole[2] > halves[2], (halves, whole)  # in turns dQ's product is 64x128
    for r in results:
        assert r["model"] <= r["shared"] < r["model"] + 1024


_AOT_EXTRAS_SCRIPT = """
import json, sys
from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper_bwd
out = {}
for d, causal, mask, lengths, window, softcap, alibi, dropout in json.loads(sys.argv[1]):
    spec = KernelSpec(d, causal, "bfloat16", "bwd", window=window, softcap=softcap,
                      lengths=lengths, attn_mask=mask, dropout=dropout, alibi=alibi)
    cfg = hopper_bwd.checked_config(spec, None)
    res = hopper_bwd.compile_for_sm90(spec, cfg)
    out[spec.uri()] = dict(shared=res["shared"], ptx=res["ptx"], model=cfg.shared_bytes(d))
json.dump(out, sys.stdout)
"""


# The renderings with extras (head dim, causal, mask, lengths, window, softcap, alibi, dropout).
_EXTRA_RENDERINGS = {
    "lengths-and-masks": [
        (128, True, "", True, False, False, False, False),
        (64, False, "", True, False, False, False, False),
        (128, False, "bool", True, False, False, False, False),
        (64, True, "add", True, False, False, False, False),
    ],
    "windows": [
        (128, True, "", False, True, False, False, False),
        (64, False, "", False, True, False, False, False),
        (128, False, "", True, True, False, False, False),
        (64, True, "add", True, True, False, False, False),
    ],
    "softcap-alibi-dropout": [
        (128, False, "", False, False, True, False, False),
        (64, True, "", False, False, False, True, False),
        (128, True, "", False, True, False, True, False),
        (64, False, "add", True, False, True, False, False),
        (64, False, "", False, False, False, False, True),
        (128, True, "bool", True, True, False, False, True),
    ],
}


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
@pytest.mark.parametrize("group", sorted(_EXTRA_RENDERINGS))
def test_extra_renderings_compile_for_sm90(group):
    """The renderings with lengths (SeqBounds), key-padding masks, windows, softcapping (its
    tanh.approx in the PTX), ALiBi and dropout, alone and together, compile with the shipped
    configs: TMA loads, dQ by TMA reduce-add, no element atomics, shared memory as the model
    says."""
    cases = _EXTRA_RENDERINGS[group]
    results = compile_in_child(_AOT_EXTRAS_SCRIPT, cases)
    _check_without_atomics(results, len(cases), ("cp.async.bulk.tensor", "cp.reduce.async.bulk"))
    capped = sum(case[5] for case in cases)
    assert sum("tanh.approx.f32" in r["ptx"] for r in results.values()) == capped


_AOT_SPACE_SCRIPT = """
import json, sys
from flashgen.core.spec import KernelSpec
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.tune.hopper_bwd_space import HopperBwdSpace
out = {}
for d, causal, picks in json.loads(sys.argv[1]):
    fitting = HopperBwdSpace(d, KNOWN_GPUS["nvidia-h200"]).fitting()
    for i in picks:
        cfg = fitting[i % len(fitting)]
        from flashgen.kernels import hopper_bwd
        res = hopper_bwd.compile_for_sm90(KernelSpec(d, causal, "bfloat16", "bwd"), cfg)
        out[f"d{d} {causal} {cfg.short()}"] = dict(shared=res["shared"],
                                                   model=cfg.shared_bytes(d))
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(AOT_REASON is not None, reason=str(AOT_REASON))
def test_tuning_space_configs_fit_the_model():
    """Configs the backward's Optuna space keeps (flashgen.tune.hopper_bwd_space: the largest
    ones, by position in its list, and a few others) compile for sm_90 with the shared memory
    its pruning model says, and within the H200's limit."""
    from flashgen.hardware.sram import KNOWN_GPUS

    cases = [(128, False, [-1, -2, 7]), (64, True, [-1, 3])]
    results = compile_in_child(_AOT_SPACE_SCRIPT, cases)
    assert len(results) >= 4
    for name, result in results.items():
        assert result["model"] <= result["shared"] < result["model"] + 1024, (name, result)
        assert result["shared"] <= KNOWN_GPUS["nvidia-h200"].smem_optin_bytes, name


def test_dkdv_choice(monkeypatch):
    """The split kind's dK/dV kernel is this family's where DKDV_AUTO lists (head dim, causal)
    and the keys are long enough, or everywhere the template has a kernel under
    FLASHGEN_BWD_DKDV=hopper; never with extras, under =portable, or where `usable` refuses."""
    monkeypatch.delenv(hopper_bwd.DKDV_ENV, raising=False)
    monkeypatch.setattr(hopper_bwd, "DKDV_AUTO", {(128, False): 1024})
    why = []
    monkeypatch.setattr(hopper_bwd, "usable", lambda spec, *t: why[0] if why else None)

    def choice(d, causal, sk, **extras):
        spec = KernelSpec(d, causal, "bfloat16", "bwd", **extras)
        q = torch.empty(1, 2, 8, d)
        k = torch.empty(1, 2, sk, d)
        return hopper_bwd.dkdv_choice(spec, q, k, k, q)

    assert choice(128, False, 1024) == hopper_bwd.DKDV_CONFIG
    assert choice(128, False, 1023) is None
    assert choice(128, True, 4096) is None
    assert choice(64, False, 4096) is None
    monkeypatch.setenv(hopper_bwd.DKDV_ENV, "hopper")
    assert choice(64, True, 16) == hopper_bwd.DKDV_CONFIG
    assert choice(128, False, 4096, window=True) is None
    why.append("not an sm_90 GPU")
    assert choice(128, False, 4096) is None
    why.clear()
    monkeypatch.setenv(hopper_bwd.DKDV_ENV, "portable")
    assert choice(128, False, 4096) is None
    monkeypatch.setenv(hopper_bwd.DKDV_ENV, "gluon")
    with pytest.raises(ValueError, match="FLASHGEN_BWD_DKDV must be"):
        choice(128, False, 4096)


def test_split_plan_launches_the_chosen_dkdv_kernel(monkeypatch):
    """Where `dkdv_choice` picks this family's kernel, the split kind's plan calls it in place
    of the portable dK/dV launch, after delta is written, with the portable launch's arguments
    (dk and dv are its output); an explicit TileConfig keeps the portable kernel. On the CPU
    (the interpreter's TMA build) a stand-in computes dK/dV with the portable kernel."""
    from flashgen.core.config import TileConfig
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.reference import attention_ref

    monkeypatch.setenv("FLASHGEN_BWD_TMA", "1")
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "0")
    monkeypatch.setenv("FLASHGEN_BWD_SHORT", "0")  # (37 x 45 would run attn_bwd_short)
    bwd._plans.clear()
    tiles = TileConfig(32, 32, 4, 1)
    calls = []

    class StandIn:
        def __init__(self, spec, cfg, q, k, v, do, device):
            assert cfg == hopper_bwd.DKDV_CONFIG and not spec.has_extras
            calls.append("built")

        def __call__(self, q, k, v, do, lse, delta, dk, dv, hq, hkv, sq, sk, scale):
            want = (out.float() * do.float()).sum(-1)
            assert torch.allclose(delta, want, rtol=1e-3, atol=1e-3)  # written before
            assert (hq, hkv, sq, sk, scale) == (4, 2, 37, 45, 0.125)
            _, gk, gv = bwd.backward(do, q, k, v, out, lse, causal=False, scale=scale,
                                     config=tiles, needs=(False, True, True))  # fmt: skip
            dk.copy_(gk)
            dv.copy_(gv)
            calls.append("called")

    monkeypatch.setattr(hopper_bwd, "dkdv_choice", lambda *a: hopper_bwd.DKDV_CONFIG)
    monkeypatch.setattr(hopper_bwd, "DkdvLaunch", StandIn)
    gen = torch.Generator().manual_seed(5)
    q, do = (torch.randn(1, 4, 37, 64, generator=gen).half() for _ in range(2))
    k, v = (torch.randn(1, 2, 45, 64, generator=gen).half() for _ in range(2))
    out, lse = forward(q, k, v, causal=False, scale=0.125)
    got = bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, deterministic=True)
    assert calls == ["built", "called"]
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*ref, causal=False, scale=0.125)[0].backward(do.double())
    for g, want in zip(got, ref, strict=True):
        assert (g.double() - want.grad).abs().max() < 2e-2
    bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, config=tiles)
    assert calls == ["built", "called"]  # an explicit config: the portable dK/dV kernel
    bwd._plans.clear()


def test_hopper_kind_keeps_a_plan_per_signature(monkeypatch):
    """The hopper kind's launches are a `hopper_bwd.Plan` built once per call signature (and
    config) and called every time; a new shape builds another; `usable` is asked once per
    signature. On the CPU a stand-in plan returns the split kind's gradients (`usable` says
    yes); a signature `usable` refuses is remembered too (test_refused_signature_...)."""
    from flashgen.kernels.fwd import forward

    built = []

    class StandIn:
        keep = True

        def __init__(self, spec, cfg, q, k, v, do, out, device):
            shipped = hopper_bwd.shipped_config(spec, k.shape[2], q.shape[1] // k.shape[1])
            assert cfg == shipped or not cfg.dq_tma
            built.append(q.shape)
            self.calls = 0

        def __call__(
            self, do, q, k, v, out, lse, scale, bounds=None, mask=None, extras=(), rows_whole=False
        ):
            assert bounds is None and mask is None and extras == ()
            self.calls += 1
            return bwd.backward(do, q, k, v, out, lse, causal=False, scale=scale, kind="split")

    asked = []
    monkeypatch.setattr(
        hopper_bwd, "usable", lambda *a, mask=None: asked.append(a[1].shape) and None
    )
    monkeypatch.setattr(hopper_bwd, "Plan", StandIn)
    bwd._plans.clear()
    for n in (33, 33, 40):
        q, k, v, do = (torch.randn(1, 2, n, 64).half() for _ in range(4))
        out, lse = forward(q, k, v, causal=False, scale=None)
        got = bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, kind="hopper")
        want = bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, kind="split")
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert built == [(1, 2, 33, 64), (1, 2, 40, 64)]
    assert asked == built  # whether the kind can run the tensors: once per signature
    plans = [p for key, p in bwd._plans.items() if key[0] == bwd._HOPPER]
    assert sorted(p.calls for p in plans) == [1, 2]
    bwd._plans.clear()


def test_lengths_take_the_hopper_kind_only_when_asked(monkeypatch):
    """A call with lengths (SeqBounds, nothing else) runs the hopper kind's rendering with
    lengths where that kind is asked for (FLASHGEN_BWD_KIND=hopper or kind="hopper"), never by
    default (`AUTO` does not take lengths: not yet measured) nor under determinism, and never
    with a mask tensor; on the CPU (no sm_90) it falls back to the split kind's gradients."""
    from flashgen.kernels import bwd_kind
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.padding import bounds as seq_bounds

    seen = []
    real = bwd._hopper

    def spy(*args):
        seen.append(args[10] is not None and args[11] is None)  # bounds, no mask
        return real(*args)

    monkeypatch.setattr(bwd, "_hopper", spy)
    monkeypatch.setattr(hopper_bwd, "AUTO", {(64, False): 1})  # AUTO would take plain calls
    bwd._plans.clear()
    q, k, v, do = (torch.randn(2, 2, 33, 64).half() for _ in range(4))
    sb = seq_bounds(2, 33, 33, [33, 20], [33, 20], "left", "cpu")
    out, lse = forward(q, k, v, causal=False, scale=None, bounds=sb)
    kw = dict(causal=False, scale=0.125, bounds=sb)
    want = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    assert seen == []
    got = bwd.backward(do, q, k, v, out, lse, **kw)  # left to flashgen: split
    assert seen == []
    got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
    assert seen == [True]  # asked: the lengths rendering, refused on the CPU
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    monkeypatch.setenv(bwd_kind.KIND_ENV, "hopper")
    bwd.backward(do, q, k, v, out, lse, **kw)
    assert seen == [True, True]
    bwd.backward(do, q, k, v, out, lse, deterministic=True, **kw)
    assert seen == [True, True]  # determinism: split
    # an expanded mask, as the ops pass it ([B, Hq, Sq, Sk]), varying along query rows
    mask = torch.ones(2, 1, 33, 33, dtype=torch.bool).expand(2, 2, 33, 33)
    got = bwd.backward(do, q, k, v, out, lse, mask=mask, **kw)
    want = bwd.backward(do, q, k, v, out, lse, mask=mask, kind="split", **kw)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    spec = KernelSpec(64, False, "float16", "bwd", lengths=True, attn_mask="bool")
    assert "key-padding" in hopper_bwd.usable(spec, q, k, v, do, mask=mask)  # the kind refuses it
    per_key = torch.ones(2, 1, 1, 33, dtype=torch.bool).expand(2, 2, 33, 33)
    assert hopper_bwd.usable(spec, q, k, v, do, mask=per_key) == "not an sm_90 GPU"
    bwd._plans.clear()


def test_key_padding_masks_take_the_hopper_kind_only_when_asked(monkeypatch):
    """A key-padding mask (constant along heads and query rows) with its key range as bounds
    (as `flashgen.runtime.primitives` passes it) runs the hopper kind's rendering with the mask
    where that kind is asked for; on the CPU it falls back to the split kind's gradients."""
    from flashgen.kernels import bwd_kind
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.padding import key_hull

    seen = []
    real = bwd._hopper

    def spy(*args):
        seen.append(None if args[11] is None else args[11].dtype)
        return real(*args)

    monkeypatch.setattr(bwd, "_hopper", spy)
    bwd._plans.clear()
    q, k, v, do = (torch.randn(2, 2, 33, 64).half() for _ in range(4))
    keep = torch.ones(2, 33, dtype=torch.bool)
    keep[1, 20:] = False
    for mask in (keep, torch.zeros(2, 33).half().masked_fill(~keep, float("-inf"))):
        expanded = mask[:, None, None, :].expand(2, 2, 33, 33)
        hull = key_hull(expanded)
        out, lse = forward(q, k, v, causal=False, scale=None, bounds=hull, mask=expanded)
        kw = dict(causal=False, scale=0.125, bounds=hull, mask=expanded, rows_whole=True)
        want = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
        got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert seen == [torch.bool, torch.float16]
    monkeypatch.setenv(bwd_kind.KIND_ENV, "hopper")
    bwd.backward(do, q, k, v, out, lse, **kw)
    assert seen[-1] == torch.float16
    bwd._plans.clear()


def test_lengths_by_default_only_where_auto_extras_lists_them(monkeypatch):
    """With the kind left open a call with lengths (or a key-padding mask) runs the hopper kind
    only where `AUTO_EXTRAS` lists (head dim, causal, mask kind) from its key length; never
    under determinism. The shipped table lists head dim 128 only (what was measured)."""
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.padding import bounds as seq_bounds
    from flashgen.kernels.padding import key_hull

    monkeypatch.setattr(hopper_bwd, "AUTO_EXTRAS", {})
    seen = []
    real = bwd._hopper
    monkeypatch.setattr(bwd, "_hopper", lambda *a: seen.append(_mask_dtype(a[11])) or real(*a))
    bwd._plans.clear()
    q, k, v, do = (torch.randn(2, 2, 40, 64).half() for _ in range(4))
    sb = seq_bounds(2, 40, 40, [40, 25], None, "right", "cpu")
    keep = torch.ones(2, 1, 1, 40, dtype=torch.bool)
    keep[0, ..., 30:] = False
    mask = keep.expand(2, 2, 40, 40)
    hull = key_hull(mask)
    out, lse = forward(q, k, v, causal=False, scale=None, bounds=sb)
    kw = dict(causal=False, scale=0.125)
    bwd.backward(do, q, k, v, out, lse, bounds=sb, **kw)
    bwd.backward(do, q, k, v, out, lse, bounds=hull, mask=mask, **kw)
    assert seen == []  # nothing listed: split
    monkeypatch.setattr(hopper_bwd, "AUTO_EXTRAS", {(64, False, ""): 41, (64, False, "bool"): 8})
    bwd.backward(do, q, k, v, out, lse, bounds=sb, **kw)
    assert seen == []  # 40 keys < 41
    bwd.backward(do, q, k, v, out, lse, bounds=hull, mask=mask, **kw)
    assert seen == [torch.bool]
    bwd.backward(do, q, k, v, out, lse, bounds=hull, mask=mask, deterministic=True, **kw)
    assert seen == [torch.bool]  # determinism: split
    monkeypatch.setattr(hopper_bwd, "AUTO_EXTRAS", {(64, False, ""): 40})
    bwd.backward(do, q, k, v, out, lse, bounds=sb, **kw)
    assert seen == [torch.bool, None]
    bwd._plans.clear()


def _mask_dtype(mask):
    return None if mask is None else mask.dtype


def test_shipped_config_per_head_dim_and_causal(monkeypatch):
    """A spec without extras takes PLAIN_CONFIGS' entry for its (head dim, causal) where
    there is one; one with extras (lengths, a window, ...) and unlisted pairs take CONFIGS'."""
    drawn = hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, persistent=True, dynamic=True,
                                       dq_tma=True, stats_smem=True)  # fmt: skip
    monkeypatch.setitem(hopper_bwd.PLAIN_CONFIGS, (64, True), drawn)
    plain = KernelSpec(64, True, "bfloat16", "bwd")
    assert hopper_bwd.shipped_config(plain) == drawn
    assert hopper_bwd.checked_config(plain, None).persistent  # (dq_tma kept where it can be)
    lengths = KernelSpec(64, True, "bfloat16", "bwd", lengths=True)
    assert hopper_bwd.shipped_config(lengths) == hopper_bwd.CONFIGS[64]
    full = KernelSpec(64, False, "bfloat16", "bwd")
    want = hopper_bwd.PLAIN_CONFIGS.get((64, False), hopper_bwd.CONFIGS[64])
    assert hopper_bwd.shipped_config(full) == want
    for (d, _causal), cfg in hopper_bwd.PLAIN_CONFIGS.items():
        assert cfg.head_dim_reason(d) is None


def test_short_calls_take_their_own_config(monkeypatch):
    """`SHORT_MHA_CONFIGS` overrides PLAIN_CONFIGS for MHA calls (one query head a kv head)
    of at most SHORT_KEYS keys of a listed (head dim, causal), `SHORT_CONFIGS` for calls of
    any group, the MHA table first; longer keys, unknown lengths and specs with extras keep
    PLAIN_CONFIGS'; the backward's plans pass the call's keys and group down."""
    short = hopper_bwd.HopperBwdConfig(2, 2, 1, 168, True, persistent=True, dynamic=True,
                                       dq_tma=True, stats_smem=True, kv_bufs=2)  # fmt: skip
    grouped = dataclasses.replace(short, dynamic=False)
    monkeypatch.setattr(hopper_bwd, "SHORT_MHA_CONFIGS", {(64, False): short})
    monkeypatch.setattr(hopper_bwd, "SHORT_CONFIGS", {(64, False): grouped, (64, True): grouped})
    plain = KernelSpec(64, False, "bfloat16", "bwd")
    longer = hopper_bwd.PLAIN_CONFIGS.get((64, False), hopper_bwd.CONFIGS[64])
    limit = hopper_bwd.SHORT_KEYS
    assert hopper_bwd.shipped_config(plain, 1024) == short
    assert hopper_bwd.shipped_config(plain, limit) == short
    assert hopper_bwd.shipped_config(plain, limit + 1) == longer
    assert hopper_bwd.shipped_config(plain, 1024, group=4) == grouped
    assert hopper_bwd.shipped_config(plain, limit + 1, group=4) == longer
    assert hopper_bwd.shipped_config(plain) == longer
    assert hopper_bwd.checked_config(plain, None, True, 1024).kv_bufs == 2
    assert not hopper_bwd.checked_config(plain, None, True, 1024, 2).dynamic
    lengths = KernelSpec(64, False, "bfloat16", "bwd", lengths=True)
    assert hopper_bwd.shipped_config(lengths, 1024) == hopper_bwd.CONFIGS[64]
    causal = KernelSpec(64, True, "bfloat16", "bwd")
    assert hopper_bwd.shipped_config(causal, 1024) == grouped  # no MHA entry: any group's
    assert hopper_bwd.shipped_config(causal, limit + 1) != grouped


def test_shipped_short_tables_fit_and_differ():
    """The shipped short-call configs are valid for their head dim and differ from the
    PLAIN_CONFIGS entry they replace (else the table says nothing)."""
    for table in (hopper_bwd.SHORT_MHA_CONFIGS, hopper_bwd.SHORT_CONFIGS):
        for (d, causal), cfg in table.items():
            assert cfg.head_dim_reason(d) is None
            assert cfg != hopper_bwd.PLAIN_CONFIGS.get((d, causal), hopper_bwd.CONFIGS[d])
    full = KernelSpec(128, False, "bfloat16", "bwd")
    assert hopper_bwd.shipped_config(full, 1024, 4).persistent
    assert not hopper_bwd.shipped_config(full, 16384, 4).persistent


def test_lengths_spec_and_config_rules():
    lengths = KernelSpec(128, True, "bfloat16", "bwd", lengths=True)
    assert hopper_bwd.spec_reason(lengths) is None
    masked = KernelSpec(128, True, "bfloat16", "bwd", lengths=True, attn_mask="add")
    assert hopper_bwd.spec_reason(masked) is None
    no_range = KernelSpec(128, True, "bfloat16", "bwd", attn_mask="bool")
    assert "key-padding" in hopper_bwd.spec_reason(no_range)
    packed = KernelSpec(128, True, "bfloat16", "bwd", lengths=True, packed=True)
    assert "packed" in hopper_bwd.spec_reason(packed)
    assert hopper_bwd.auto_choice(lengths, 1024) and not hopper_bwd.auto_choice(lengths, 1023)
    assert not hopper_bwd.auto_choice(dataclasses.replace(lengths, head_dim=64), 4095)
    assert hopper_bwd.checked_config(lengths, None).stats_smem
    plain = dataclasses.replace(hopper_bwd.CONFIGS[128], stats_smem=False)
    with pytest.raises(ValueError, match="lengths need stats_smem"):
        hopper_bwd.checked_config(lengths, plain)
    source = render(lengths, hopper_bwd.FAMILY)
    assert "SeqBounds," in source and "p = gl.where(offs_k[:, None] < len_k, p, 0.0)" in source
    plain_source = render(KernelSpec(128, True, "bfloat16", "bwd"), hopper_bwd.FAMILY)
    assert "SeqBounds," not in plain_source and "len_k, p, 0.0" not in plain_source
    compile(source, lengths.uri(), "exec")


def test_windows_take_the_hopper_kind_where_asked_or_listed(monkeypatch):
    """A windowed call runs the hopper kind's windowed rendering where that kind is asked for
    or `AUTO_WINDOW` lists (head dim, causal, mask or not) from its key length, with the window clamped as
    the split kind gets it (right 0 when causal); never under determinism; on the CPU (no
    sm_90) it falls back to the split kind's gradients."""
    from flashgen.kernels.fwd import forward

    seen = []
    real = bwd._hopper
    monkeypatch.setattr(bwd, "_hopper", lambda *a: seen.append(a[12]) or real(*a))
    monkeypatch.setattr(hopper_bwd, "AUTO", {(64, True): 1})  # AUTO would take plain calls
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {})
    bwd._plans.clear()
    q, k, v, do = (torch.randn(2, 2, 37, 64).half() for _ in range(4))
    out, lse = forward(q, k, v, causal=True, scale=None, window=(5, 9))
    kw = dict(causal=True, scale=0.125, window=(5, 9))
    want = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    got = bwd.backward(do, q, k, v, out, lse, **kw)  # not listed: split
    assert seen == []
    got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
    assert seen == [(5, 0)]  # asked; refused on the CPU
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {(64, True, False): 38})
    bwd.backward(do, q, k, v, out, lse, **kw)
    assert seen == [(5, 0)]  # 37 keys < 38
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {(64, True, False): 37})
    bwd.backward(do, q, k, v, out, lse, **kw)
    assert seen == [(5, 0), (5, 0)]
    bwd.backward(do, q, k, v, out, lse, deterministic=True, **kw)
    assert len(seen) == 2  # determinism: split
    spec = KernelSpec(64, True, "float16", "bwd", window=True)
    assert hopper_bwd.spec_reason(spec) is None
    assert hopper_bwd.auto_choice(spec, 37) and not hopper_bwd.auto_choice(spec, 36)
    assert not hopper_bwd.auto_choice(dataclasses.replace(spec, causal=False), 1 << 20)
    # a window with a key-padding mask (its key range as lengths): its own entries
    padded = dataclasses.replace(spec, lengths=True, attn_mask="bool")
    assert hopper_bwd.spec_reason(padded) is None and not hopper_bwd.auto_choice(padded, 1 << 20)
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {(64, True, True): 100})
    assert not hopper_bwd.auto_choice(spec, 1 << 20)  # the maskless spec: not listed now
    assert hopper_bwd.auto_choice(padded, 100) and not hopper_bwd.auto_choice(padded, 99)
    assert hopper_bwd.auto_choice(dataclasses.replace(padded, attn_mask="add"), 100)
    assert not hopper_bwd.auto_choice(dataclasses.replace(padded, causal=False), 1 << 20)
    # the window's table, not the plain one's, answers for windowed specs
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {})
    assert not hopper_bwd.auto_choice(spec, 1 << 20)
    bwd._plans.clear()


def test_softcap_alibi_and_dropout_take_the_hopper_kind_where_asked_or_listed(monkeypatch):
    """Softcapped, ALiBi and dropout calls run the hopper kind's renderings with them where
    asked for (here with `AUTO_SCORE_MODS` emptied) or where that table lists every
    modification of the call, given the cap, the checked slopes and the forward's (p, seed); on
    the CPU they fall back to the split kind's gradients."""
    from flashgen.kernels.alibi import check_slopes
    from flashgen.kernels.fwd import forward

    seen = []
    real = bwd._hopper
    monkeypatch.setattr(bwd, "_hopper", lambda *a: seen.append(a[13:16]) or real(*a))
    monkeypatch.setattr(hopper_bwd, "AUTO", {(64, False): 1})  # AUTO would take plain calls
    monkeypatch.setattr(hopper_bwd, "AUTO_SCORE_MODS", {})
    bwd._plans.clear()
    q, k, v, do = (torch.randn(2, 4, 29, 64).half() for _ in range(4))
    slopes = check_slopes(torch.tensor([0.5, 0.25, 0.125, 0.0625]), q)
    drop = (0.25, 1234)
    for extra in ({"softcap": 7.5}, {"alibi": slopes}, {"softcap": 7.5, "alibi": slopes},
                  {"dropout": drop}, {"dropout": drop, "alibi": slopes}):  # fmt: skip
        seen.clear()
        out, lse = forward(q, k, v, causal=False, scale=None, **extra)
        kw = dict(causal=False, scale=0.125, **extra)
        want = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
        bwd.backward(do, q, k, v, out, lse, **kw)
        assert seen == []  # left open: split
        got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
        assert len(seen) == 1
        assert seen[0][0] == extra.get("softcap") and seen[0][1] is extra.get("alibi")
        assert seen[0][2] == extra.get("dropout")
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    spec = KernelSpec(64, False, "float16", "bwd", softcap=True)
    monkeypatch.setattr(hopper_bwd, "AUTO_SCORE_MODS", {(64, False, "softcap"): 29})
    assert hopper_bwd.auto_choice(spec, 29) and not hopper_bwd.auto_choice(spec, 28)
    # two modifications: both must be listed, and the longer threshold holds
    both = dataclasses.replace(spec, alibi=True)
    assert not hopper_bwd.auto_choice(both, 1 << 20)
    table = {(64, False, "softcap"): 29, (64, False, "alibi"): 40}
    monkeypatch.setattr(hopper_bwd, "AUTO_SCORE_MODS", table)
    assert hopper_bwd.auto_choice(both, 40) and not hopper_bwd.auto_choice(both, 39)
    assert not hopper_bwd.auto_choice(dataclasses.replace(spec, causal=True), 1 << 20)
    # the score modifications' table answers before the window's
    windowed = dataclasses.replace(spec, window=True)
    monkeypatch.setattr(hopper_bwd, "AUTO_WINDOW", {(64, False, False): 1})
    monkeypatch.setattr(hopper_bwd, "AUTO_SCORE_MODS", {})
    assert not hopper_bwd.auto_choice(windowed, 1 << 20)
    bwd._plans.clear()


@needs_gluon
@pytest.mark.parametrize(
    "extra",
    [{}, {"window": True}, {"softcap": True, "alibi": True}, {"dropout": True, "window": True},
     {"lengths": True, "attn_mask": "add", "window": True, "dropout": True}],
    ids=lambda e: "-".join(e) or "plain",
)  # fmt: skip
def test_plan_passes_the_kernels_positional_arguments(extra, monkeypatch):
    """A `Plan` launches the rendered kernel with exactly its positional parameters (the
    constexprs follow them): the extras' arguments as `plans.variant_args` gives them to every
    family, after the scale, in the template's order (recorded, not run)."""
    from flashgen.kernels.codegen import load_family
    from flashgen.kernels.plans import variant_args

    monkeypatch.setattr(hopper_bwd, "_sm_count", lambda index: 132)
    spec = KernelSpec(64, False, "bfloat16", "bwd", **extra)
    cfg = hopper_bwd.checked_config(spec, None)
    q, k, v, do, out = (torch.zeros(2, 4, 70, 64, dtype=torch.bfloat16) for _ in range(5))
    plan = hopper_bwd.Plan(spec, cfg, q, k, v, do, out, None)
    seen = []
    plan.main = lambda *args: seen.append(args)
    plan.convert = lambda *args: None
    lse = torch.zeros(2, 4, 70)
    bounds = torch.zeros(2, 4, dtype=torch.int32) if spec.lengths else None
    mask = torch.zeros(2, 1, 1, 70).expand(2, 4, 70, 70) if spec.attn_mask else None
    extras = variant_args(
        0.125, (9, 3) if spec.window else None, 20.0 if spec.softcap else None, None, None,
        (0.1, 77) if spec.dropout else None, torch.ones(4).expand(2, 4) if spec.alibi else None,
    )  # fmt: skip
    plan(do, q, k, v, out, lse, 0.125, delta=lse, bounds=bounds, mask=mask, extras=extras)
    (args,) = seen
    names = load_family(spec, hopper_bwd.FAMILY).attn_bwd_ws.arg_names
    positional = names[: len(names) - len(hopper_bwd._constexprs(cfg, True))]
    assert len(args) == len(positional), (positional, len(args))
    by_name = dict(zip(positional, args, strict=True))
    assert by_name["sm_scale"] == 0.125 and args[len(args) - len(extras) :] == extras
    if spec.window:
        assert (by_name["WIN_LEFT"], by_name["WIN_RIGHT"]) == (9, 3)
    if spec.softcap:
        assert by_name["softcap_raw"] == 20.0 / 0.125
    if spec.alibi:
        assert by_name["stride_sb"] == 0
    if spec.dropout:
        assert (by_name["drop_p"], by_name["drop_seed"]) == (0.1, 77)
    if spec.attn_mask:
        assert by_name["Mask"] is mask and by_name["stride_mn"] == 1


def test_refused_signature_is_asked_once_and_falls_back(monkeypatch):
    """kind="hopper" on tensors it cannot run (CPU here) gives the split kind's gradients
    every call, and `usable` is asked once for the signature, not on every call."""
    from flashgen.kernels.fwd import forward

    asked = []
    real = hopper_bwd.usable
    monkeypatch.setattr(
        hopper_bwd, "usable", lambda *a, mask=None: asked.append(1) or real(*a, mask=mask)
    )
    bwd._plans.clear()
    q, k, v, do = (torch.randn(1, 2, 33, 64).half() for _ in range(4))
    out, lse = forward(q, k, v, causal=False, scale=None)
    want = bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, kind="split")
    for _ in range(3):
        got = bwd.backward(do, q, k, v, out, lse, causal=False, scale=0.125, kind="hopper")
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert asked == [1]
    bwd._plans.clear()


# ---- numerics on the GPU -----------------------------------------------------------------


def _run_on_gpu(script: str, payload) -> None:
    """Run `script` (the GPU checks of one test) in a child process with `payload` as its JSON
    argument: a kernel fault (a lost CUDA context) then fails that test only, not every GPU test
    after it in the session."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(payload)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]


# What the child scripts below share: counting the plans a launcher class builds (so a silent
# fallback to another kernel fails), seeded inputs on the GPU, and a float64 reference of attention restricted to
# `visible` ([B, 1, Sq, Sk]; a row that sees no key gives zeros) whose gradients bound the
# hopper kind's by 3x the split kind's own error plus 8e-3 of the gradient's size.
_CHILD_HELPERS = """
import json, os, sys
import torch
def count_builds(module, name):
    built = []
    real = getattr(module, name)
    class Counted(real):
        __slots__ = ()
        def __init__(self, *a, **kw):
            built.append(1)
            super().__init__(*a, **kw)
    setattr(module, name, Counted)
    return built
def inputs(b, hq, hkv, sq, sk, d, dtype, seed, q_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(b, hq, sq, d, generator=gen) * q_scale).to(dtype).cuda()
    k, v = (torch.randn(b, hkv, sk, d, generator=gen).to(dtype).cuda() for _ in range(2))
    do = torch.randn(b, hq, sq, d, generator=gen).to(dtype).cuda()
    return q, k, v, do
def check_against_split(name, got, split, q, k, v, do, visible):
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[3]
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(hq // hkv, 1) for t in leaves[1:])
    seen = visible.any(-1, keepdim=True)
    s = (leaves[0] @ kk.transpose(-1, -2)) * d**-0.5
    s = torch.where(seen, s.masked_fill(~visible, float("-inf")), 0.0)
    (torch.where(seen, torch.softmax(s, -1), 0.0) @ vv).backward(do.double())
    compare_to_split(name, got, split, leaves, q.dtype)

def compare_to_split(name, got, split, leaves, dtype):
    # the hopper kind's gradients (in dtype, finite) within 3x the split kind's error against
    # the float64 leaves' gradients, plus a small floor
    for grad, g, h, leaf in zip("qkv", got, split, leaves):
        assert g.dtype == dtype and bool(torch.isfinite(g).all()), f"{name}: d{grad}"
        err = (g.double() - leaf.grad).abs().max().item()
        bound = 3.0 * (h.double() - leaf.grad).abs().max().item()
        bound += 8e-3 * max(1.0, leaf.grad.abs().max().item())
        assert err <= bound, f"{name}: d{grad} {err:.3e} > {bound:.3e}"
"""

GPU_CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, dtype, causal)
    (2, 4, 4, 1000, 1000, 128, "bfloat16", False),
    (2, 4, 4, 1000, 1000, 128, "bfloat16", True),
    (1, 8, 2, 777, 777, 128, "float16", True),  # GQA 4, odd length
    (1, 4, 4, 129, 300, 128, "bfloat16", False),  # more keys than queries
    (1, 4, 4, 300, 129, 128, "bfloat16", True),  # causal, fewer keys
    (1, 2, 2, 1, 1, 64, "float16", True),
    (2, 4, 2, 1000, 1000, 64, "bfloat16", True),
    (4, 16, 8, 1000, 1000, 128, "bfloat16", True),  # 256 work items: several per program
    (1, 4, 1, 257, 1031, 64, "float16", False),
    (4, 16, 8, 1000, 1000, 128, "bfloat16", False),  # 256 work items, not causal (GQA 2)
]

# Runs every GPU case for one config in a child process: a kernel fault (a lost CUDA context)
# then fails this test only, not every GPU test after it in the session.
_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.core.spec import KernelSpec
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.reference import attention_ref, max_abs_err, sdpa_same_dtype
config, cases = json.loads(sys.argv[1])
cfg = None if config is None else hopper_bwd.HopperBwdConfig(*config)
for b, hq, hkv, sq, sk, d, dtype, causal in cases:
    name = f"{b}x{hq}/{hkv}x{sq}x{sk} d{d} {dtype} causal={causal}"
    dtype = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, sq, sk, d, dtype, 3)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    spec = KernelSpec(d, causal, str(dtype).removeprefix("torch."), "bwd")
    assert hopper_bwd.usable(spec, q, k, v, do) is None, name  # no silent fallback
    got = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=d**-0.5, kind="hopper",
                       config=cfg)
    # the second call of a signature launches the plan's compiled kernels directly: dK and dV
    # bit for bit (no atomics), dQ up to the order of its fp32 adds
    again = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=d**-0.5, kind="hopper",
                         config=cfg)
    assert torch.equal(got[1], again[1]) and torch.equal(got[2], again[2]), name
    assert (got[0].float() - again[0].float()).abs().max() <= 1e-2 * got[0].float().abs().max(), name
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*ref, causal=causal)[0].backward(do.double())
    eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*eager, causal=causal).backward(do)
    for grad, g, want, same in zip("qkv", got, ref, eager):
        assert g.shape == want.shape and g.dtype == dtype, name
        assert bool(torch.isfinite(g).all()), f"{name}: d{grad} not finite"
        err = max_abs_err(g, want.grad)
        bound = 3.0 * max_abs_err(same.grad, want.grad) + 8e-3 * max(
            1.0, want.grad.abs().max().item())
        assert err <= bound, f"{name}: d{grad} {err:.3e} > {bound:.3e}"
print("ok", len(cases))
"""
)


@on_sm90
@pytest.mark.parametrize(
    "config",
    [
        None,
        (2, 2, 2, 168, False, False),
        (2, 2, 1, 168, True, False, False, 1, 64, True),
        (2, 2, 2, 168, False, False, False, 1, 64, True),
        (2, 2, 1, 168, True, False, False, 1, 64, True, True),
        (2, 2, 1, 168, True, False, True, 1, 64, True, True),
        (2, 2, 1, 168, True, False, False, 1, 64, True, True, True),
        (2, 2, 1, 168, True, False, False, 1, 64, True, True, True, 2),
        (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 2),
        (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 1, True),
        (2, 2, 1, 168, True, False, True, 1, 64, True, True, False, 2, True),
    ],
    # other configs: benchmarks/hopper_bwd.py checks them
    ids=[
        "shipped",
        "c2-own-dq",
        "share-tma-reduce",
        "own-dq-tma-reduce",
        "stats-smem",
        "persistent-stats-smem",
        "dq-turns",
        "dq-turns-ds2",
        "persistent-ds2",
        "dynamic",
        "dynamic-ds2",
    ],
)
def test_matches_float64(config):
    """dQ/dK/dV against float64 autograd within 3x PyTorch's own same-dtype error plus 8e-3 of
    the gradient's size, over GPU_CASES (GQA, causal both ways, odd lengths, fp16 and bf16):
    the cases of the head dims the config can run (a refused head dim is
    test_config_refused_for_a_head_dim_it_cannot_split's)."""
    cfg = None if config is None else hopper_bwd.HopperBwdConfig(*config)
    cases = [c for c in GPU_CASES if cfg is None or cfg.head_dim_reason(c[5]) is None]
    assert len({c[5] for c in cases}) >= 1 and len(cases) >= 5
    _run_on_gpu(_GPU_SCRIPT, [config, cases])


# The split kind with this family's dK/dV kernel (`dkdv_choice`), in a child process as above.
_DKDV_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.bench.checks import grad_check
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.fwd import forward
built = count_builds(hopper_bwd, "DkdvLaunch")
for b, hq, hkv, sq, sk, d, dtype, causal, env in json.loads(sys.argv[1]):
    os.environ[hopper_bwd.DKDV_ENV] = env
    name = f"{b}x{hq}/{hkv}x{sq}x{sk} d{d} {dtype} causal={causal} {env}"
    dtype = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, sq, sk, d, dtype, 4)
    out, lse = forward(q, k, v, causal=causal, scale=None)
    before = len(built)
    got = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=d**-0.5, deterministic=True)
    again = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=d**-0.5, deterministic=True)
    assert len(built) == before + 1, name  # this family's dK/dV kernel, one plan
    for g, h in zip(got, again):
        assert torch.equal(g, h), f"{name}: not bit-identical run to run"
        assert g.dtype == dtype, name
    ok, errors = grad_check(got, q, k, v, do, causal=causal)  # the bound test_matches_float64 uses
    assert ok, (name, errors)
print("ok")
"""
)


@on_sm90
def test_split_with_the_hopper_dkdv_kernel_matches_float64():
    """The deterministic split backward with this family's dK/dV kernel (DKDV_AUTO's shapes,
    and every head dim / causal mode under FLASHGEN_BWD_DKDV=hopper): float64 bound as above,
    bit-identical run to run, GQA, odd lengths, more keys than queries and the reverse."""
    cases = [
        (2, 4, 4, 1100, 1100, 128, "bfloat16", False, "auto"),
        (1, 8, 2, 1024, 1500, 128, "float16", False, "auto"),  # GQA 4, more keys
        (1, 4, 4, 300, 129, 128, "bfloat16", True, "hopper"),  # causal, fewer keys
        (2, 4, 2, 1000, 1000, 64, "bfloat16", True, "hopper"),
        (1, 4, 1, 257, 1031, 64, "float16", False, "hopper"),
    ]
    _run_on_gpu(_DKDV_GPU_SCRIPT, cases)


# Lengths (SeqBounds) in a child process as above: the hopper kind's rendering with lengths
# against float64 autograd through the dense mask the lengths stand for, bounded by 3x the split
# kind's own error (the split kind's lengths kernels are float64-tested in test_padding.py) plus
# 8e-3 of the gradient's size; rows outside the ranges exactly zero.
_LENGTHS_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.core.spec import KernelSpec
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import bounds as seq_bounds, dense_mask
for b, hq, hkv, sq, sk, d, dtype, causal, side, klens, qlens in json.loads(sys.argv[1]):
    name = f"{b}x{hq}/{hkv}x{sq}x{sk} d{d} {dtype} causal={causal} {side} k={klens} q={qlens}"
    dt = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, sq, sk, d, dt, 5)
    sb = seq_bounds(b, sq, sk, klens, qlens, side, "cuda")
    out, lse = forward(q, k, v, causal=causal, scale=None, bounds=sb)
    spec = KernelSpec(d, causal, dtype, "bwd", lengths=True)
    assert hopper_bwd.usable(spec, q, k, v, do) is None, name  # no silent fallback
    kw = dict(causal=causal, scale=d**-0.5, bounds=sb)
    got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
    again = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)  # direct launches
    split = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    for g, h in zip(got[1:], again[1:]):
        assert torch.equal(g, h), f"{name}: dK/dV differ between the JIT and direct launches"
    check_against_split(name, got, split, q, k, v, do, dense_mask(sb, sq, sk, causal=causal))
    for i, (qs, ql, ks, kl) in enumerate(sb.tolist()):
        outside_q = torch.ones(sq, dtype=torch.bool)
        outside_q[qs:qs + ql] = False
        outside_k = torch.ones(sk, dtype=torch.bool)
        outside_k[ks:ks + kl] = False
        assert not got[0][i][:, outside_q.cuda()].any(), f"{name}: dQ outside the query range"
        for g in got[1:]:
            assert not g[i][:, outside_k.cuda()].any(), f"{name}: dK/dV outside the key range"
print("ok", len(json.loads(sys.argv[1])))
"""
)


@on_sm90
def test_lengths_match_float64():
    """The hopper kind with lengths: left and right padding, an entry with no keys or a single
    one, more keys than queries, GQA, causal both ways, both head dims, fp16 and bf16."""
    cases = [
        (3, 4, 2, 700, 700, 128, "bfloat16", True, "left", [700, 333, 0], [700, 333, 0]),
        (2, 4, 4, 700, 700, 128, "bfloat16", False, "right", [517, 64], [700, 129]),
        (2, 8, 2, 300, 1031, 64, "float16", False, "right", [1031, 1], None),
        (2, 4, 4, 1000, 1000, 64, "bfloat16", True, "right", [1000, 555], [1000, 555]),
        (1, 2, 2, 129, 129, 128, "float16", True, "left", [0], [129]),
    ]
    _run_on_gpu(_LENGTHS_GPU_SCRIPT, cases)


# Key-padding masks (with their key range, as `flashgen.runtime.primitives` passes them) in a
# child process as above: float64 reference with the hidden keys at -inf, bounded by 3x the split
# kind's own error plus 8e-3 of the gradient's size. No row sees only hidden keys (PyTorch
# averages a row whose keys are all at finfo.min; both kinds give such a row no gradient).
_MASK_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import key_hull
built = count_builds(hopper_bwd, "Plan")
for b, hq, hkv, n, d, dtype, causal, kind, pattern in json.loads(sys.argv[1]):
    name = f"{b}x{hq}/{hkv}x{n} d{d} {dtype} causal={causal} {kind} {pattern}"
    dt = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, n, n, d, dt, 6)
    gen = torch.Generator().manual_seed(6)  # the holes' draw
    keep = torch.ones(b, n, dtype=torch.bool)
    if pattern == "right":
        keep[1, n // 3:] = False
    elif pattern == "left":
        keep[1, : n // 3] = False
    else:
        keep = torch.rand(b, n, generator=gen) > 0.3
        keep[:, 0] = True
    if kind == "bool":
        m = keep
    else:
        hidden = float("-inf") if kind == "add_inf" else torch.finfo(dt).min
        m = torch.zeros(b, n, dtype=dt).masked_fill(~keep, hidden)
    mask = m.cuda()[:, None, None, :].expand(b, hq, n, n)
    hull = key_hull(mask)
    out, lse = forward(q, k, v, causal=causal, scale=None, bounds=hull, mask=mask)
    kw = dict(causal=causal, scale=d**-0.5, bounds=hull, mask=mask, rows_whole=True)
    before = len(built)
    # The key range starts at key 0 (rows_whole): dK and dV are allocated without a zero fill,
    # so the kernel must store every key row (zeros past the range). With the deterministic
    # mode's fill on, a new tensor is NaN: a row left unwritten fails the finite check below.
    torch.use_deterministic_algorithms(True)
    try:
        got = bwd.backward(do, q, k, v, out, lse, kind="hopper", deterministic=False, **kw)
    finally:
        torch.use_deterministic_algorithms(False)
    assert len(built) == before + 1, f"{name}: the hopper kind did not run"
    split = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    visible = keep.cuda()[:, None, None, :].expand(b, 1, n, n)
    if causal:
        visible = visible & torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
    check_against_split(name, got, split, q, k, v, do, visible)
print("ok", len(json.loads(sys.argv[1])))
"""
)


@on_sm90
def test_key_padding_masks_match_float64():
    """The hopper kind with a key-padding mask: boolean and additive (HF's finfo.min, and
    -inf), right padding (the range flagged dense: the mask is not read; key blocks past it
    store zeros), left padding and holes (read once a work item), GQA, causal both ways, both
    head dims; dK and dV not zero-filled first (the key range starts at key 0)."""
    cases = [
        (2, 4, 4, 700, 128, "bfloat16", True, "bool", "right"),
        (2, 4, 2, 777, 128, "float16", False, "add", "left"),
        (2, 8, 2, 1000, 64, "bfloat16", False, "bool", "holes"),
        (2, 4, 4, 513, 64, "bfloat16", True, "add", "right"),
        (1, 4, 4, 300, 128, "bfloat16", False, "add_inf", "holes"),
        (2, 8, 2, 1000, 64, "bfloat16", True, "bool", "holes"),  # causal GQA (a default since
        (2, 8, 2, 1030, 128, "float16", True, "add", "left"),  # session 49, AUTO_EXTRAS)
    ]
    _run_on_gpu(_MASK_GPU_SCRIPT, cases)


# Sliding windows (alone or with lengths) in a child process as above: float64 reference through
# the dense mask the window stands for, bounded by 3x the split kind's own error (the split
# kind's windows are float64-tested in test_window.py) plus 8e-3 of the gradient's size.
_WINDOW_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.kernels import bwd, hopper_bwd
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import bounds as seq_bounds, dense_mask
from flashgen.kernels.plans import clamp_window
built = count_builds(hopper_bwd, "Plan")
for b, hq, hkv, sq, sk, d, dtype, causal, window, klens in json.loads(sys.argv[1]):
    name = f"{b}x{hq}/{hkv}x{sq}x{sk} d{d} {dtype} causal={causal} window={window} k={klens}"
    dt = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, sq, sk, d, dt, 7)
    sb = None if klens is None else seq_bounds(b, sq, sk, klens, None, "right", "cuda")
    out, lse = forward(q, k, v, causal=causal, scale=None, window=tuple(window), bounds=sb)
    kw = dict(causal=causal, scale=d**-0.5, window=tuple(window), bounds=sb)
    before = len(built)
    got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
    assert len(built) == before + 1, f"{name}: the hopper kind did not run"
    again = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)  # direct launches
    for g, h in zip(got[1:], again[1:]):
        assert torch.equal(g, h), f"{name}: dK/dV differ between the JIT and direct launches"
    split = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    whole = torch.tensor([[0, sq, 0, sk]] * b, dtype=torch.int32, device="cuda")
    visible = dense_mask(whole if sb is None else sb, sq, sk, causal=causal,
                         window=clamp_window(window, causal, sq, sk))
    check_against_split(name, got, split, q, k, v, do, visible)
print("ok", len(json.loads(sys.argv[1])))
"""
)


@on_sm90
def test_windows_match_float64():
    """The hopper kind with a sliding window: causal (right size ignored) and two-sided,
    windows narrower than a query block and wider than the sequence, a zero window (each query
    sees its own key only), key blocks no query sees (more keys than queries), GQA, lengths,
    both head dims, fp16 and bf16."""
    cases = [
        (2, 4, 4, 1000, 1000, 128, "bfloat16", True, [256, 99], None),
        (2, 4, 2, 777, 777, 128, "float16", False, [37, 200], None),
        (1, 8, 2, 300, 1031, 64, "bfloat16", False, [100, 5], None),
        (2, 4, 4, 1000, 1000, 64, "bfloat16", True, [0, 0], None),
        (1, 4, 4, 513, 513, 64, "float16", False, [4000, 4000], None),
        (2, 4, 4, 700, 700, 128, "bfloat16", True, [129, 0], [700, 333]),
        (2, 4, 2, 640, 640, 64, "bfloat16", False, [64, 64], [517, 64]),
    ]
    _run_on_gpu(_WINDOW_GPU_SCRIPT, cases)


# Softcapping and ALiBi (alone, together, with a window or a key-padding mask) in a child process
# as above: float64 reference with the same score modifications, bounded by 3x the split kind's
# own error (its softcap and ALiBi are float64-tested in test_softcap.py / test_alibi.py) plus
# 8e-3 of the gradient's size.
_SCORE_MOD_GPU_SCRIPT = (
    _CHILD_HELPERS
    + """
from flashgen.kernels import bwd, dropout, hopper_bwd
from flashgen.kernels.alibi import bias_ref, check_slopes
from flashgen.kernels.fwd import forward
from flashgen.kernels.padding import key_hull
from flashgen.kernels.plans import clamp_window
from flashgen.kernels.reference import hidden_ref
built = count_builds(hopper_bwd, "Plan")
for b, hq, hkv, n, d, dtype, causal, cap, alibi, window, pad, p in json.loads(sys.argv[1]):
    name = (f"{b}x{hq}/{hkv}x{n} d{d} {dtype} causal={causal} cap={cap} alibi={alibi} "
            f"window={window} pad={pad} p={p}")
    drop = None if p is None else (p, 4321)
    dt = getattr(torch, dtype)
    q, k, v, do = inputs(b, hq, hkv, n, n, d, dt, 8, q_scale=2.0)  # scores large enough to cap
    slopes = None
    if alibi:
        slopes = check_slopes(2.0 ** -torch.arange(1, hq + 1, dtype=torch.float32).cuda(), q)
    win = None if window is None else clamp_window(tuple(window), causal, n, n)
    mask = hull = None
    keep = torch.ones(b, n, dtype=torch.bool)
    if pad:
        keep[-1, n // 2:] = False
        mask = keep.cuda()[:, None, None, :].expand(b, hq, n, n)
        hull = key_hull(mask)
    out, lse = forward(q, k, v, causal=causal, scale=None, window=win, softcap=cap, bounds=hull,
                       mask=mask, alibi=slopes, dropout=drop)
    kw = dict(causal=causal, scale=d**-0.5, window=win, softcap=cap, bounds=hull, mask=mask,
              alibi=slopes, dropout=drop)
    if pad:
        kw["rows_whole"] = True
    before = len(built)
    got = bwd.backward(do, q, k, v, out, lse, kind="hopper", **kw)
    assert len(built) == before + 1, f"{name}: the hopper kind did not run"
    split = bwd.backward(do, q, k, v, out, lse, kind="split", **kw)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    kk, vv = (t.repeat_interleave(hq // hkv, 1) for t in leaves[1:])
    s = (leaves[0] @ kk.transpose(-1, -2)) * d**-0.5
    if cap is not None:
        s = cap * torch.tanh(s / cap)
    if alibi:
        s = s + bias_ref(slopes, n, n)
    visible = keep.cuda()[:, None, None, :] & ~hidden_ref(n, n, causal=causal, window=win).cuda()
    s = s.masked_fill(~visible, float("-inf"))
    rows = visible.any(-1, keepdim=True)  # a row that sees no key gives zeros, never NaN
    probs = torch.softmax(s.masked_fill(~rows, 0.0), -1) * rows
    if drop is not None:  # the kernels' own keep flags (flashgen.kernels.dropout_ref)
        keep = dropout.keep_mask(drop[1], p, b, hq, n, n, "cuda")
        probs = probs * keep / (1 - p)
    (probs @ vv).backward(do.double())
    compare_to_split(name, got, split, leaves, dt)
print("ok", len(json.loads(sys.argv[1])))
"""
)


@on_sm90
def test_softcap_alibi_and_dropout_match_float64():
    """The hopper kind with softcapping (caps the scores reach), ALiBi (per-head slopes) and
    dropout (the forward's keep flags), alone, together, with a causal or two-sided window and
    with a key-padding mask, and a window with a key-padding mask alone; GQA, odd lengths, both
    head dims, fp16 and bf16."""
    cases = [
        (2, 4, 4, 700, 128, "bfloat16", True, 5.0, False, None, False, None),
        (2, 8, 2, 777, 64, "float16", False, 3.0, False, None, False, None),
        (2, 4, 2, 1000, 128, "bfloat16", False, None, True, None, False, None),
        (1, 8, 8, 513, 64, "bfloat16", True, None, True, None, False, None),
        (2, 4, 4, 640, 128, "float16", True, 8.0, True, [200, 0], False, None),
        (2, 4, 4, 600, 64, "bfloat16", False, 4.0, False, [100, 37], True, None),
        (2, 4, 2, 700, 128, "bfloat16", False, None, True, [300, 300], False, None),
        (2, 12, 12, 384, 64, "bfloat16", False, None, False, None, True, 0.1),  # BERT-like
        (2, 8, 2, 1000, 128, "float16", True, None, True, [300, 0], False, 0.3),
        (1, 4, 4, 777, 64, "bfloat16", True, None, False, None, False, 0.5),
        (2, 4, 2, 640, 128, "bfloat16", True, None, False, [200, 0], True, None),  # window+pad
    ]
    _run_on_gpu(_SCORE_MOD_GPU_SCRIPT, cases)
