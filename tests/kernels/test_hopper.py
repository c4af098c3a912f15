"""The Hopper forward family (flashgen.kernels.hopper, templates/attn_fwd_hopper.py.jinja).

Gluon kernels do not run in Triton's CPU interpreter, so on the CPU this renders the template
and compiles it ahead of time for sm_90 (layout/type errors, shared memory against the model)
where the installed Triton has the Gluon API; numerics are checked on an sm_90 GPU (`gpu`)
against float64, including the backward fed by this forward's out and LSE.
"""

from __future__ import annotations

import re

import pytest
import torch

from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper
from flashgen.kernels.codegen import load_family, render
from flashgen.kernels.reference import attention_ref, max_abs_err, sdpa_same_dtype, tolerance

API, API_REASON = hopper.gluon_api()
needs_gluon = pytest.mark.skipif(API is None, reason=f"no usable Gluon: {API_REASON}")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not ON_SM90, reason="needs an sm_90 GPU (H100/H200)")
HEAD_DIMS = hopper.RENDERABLE_HEAD_DIMS


# ---- rendering and selection (CPU) ------------------------------------------------------


@needs_gluon
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS, ids=lambda d: f"d{d}")
def test_render(head_dim, dtype, causal):
    spec = KernelSpec(head_dim, causal, dtype, "fwd")
    source = render(spec, "hopper")
    assert f"# Kernel: {spec.uri()}\n" in source and "Hopper warp-specialised" in source
    assert f"HEAD_DIM = gl.constexpr({head_dim})" in source
    assert f"dtype: gl.constexpr = gl.{dtype}" in source
    assert f"tma.{API['tma_load']}(" in source and f"tma.{API['tma_store']}(" in source
    # Causal: the diagonal mask and the longest-first order exist only in the causal rendering.
    assert ("offs_n[None, :] <= offs_m[:, None]" in source) == causal
    assert ("pid_m = num_m - 1 - r // heads_here" in source) == causal
    compile(source, spec.uri(), "exec")  # valid Python
    assert hasattr(load_family(spec, "hopper"), "attn_fwd_ws")


@needs_gluon
@pytest.mark.parametrize(
    "spec, fragment",
    [
        (KernelSpec(96, False, "bfloat16", "fwd"), "head dim 96"),
        (KernelSpec(128, False, "float32", "fwd"), "dtype float32"),
        (KernelSpec(128, False, "float16", "bwd"), "forward only"),
    ],
)
def test_specs_without_a_hopper_kernel(spec, fragment):
    assert fragment in hopper.spec_reason(spec, forced=True)
    with pytest.raises((ValueError, KeyError)):
        render(spec, "hopper")


def test_auto_choice_is_where_it_measured_faster():
    """Head dim 64 renders but is not chosen unless forced (slower than portable, RESULTS.md)."""
    d64 = KernelSpec(64, False, "bfloat16", "fwd")
    d128 = KernelSpec(128, True, "float16", "fwd")
    assert "measured slower" in hopper.spec_reason(d64)
    assert hopper.spec_reason(d64, forced=True) == API_REASON
    assert hopper.spec_reason(d128) == API_REASON


def test_not_chosen_for_cpu_tensors_or_when_forced_portable(monkeypatch):
    spec = KernelSpec(128, False, "bfloat16", "fwd")
    q = torch.zeros(1, 1, 8, 128, dtype=torch.bfloat16)
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    assert not hopper.choose(spec, q, q, q, 8)  # CPU tensors never take a GPU-only kernel
    if ON_SM90:
        monkeypatch.setenv(hopper.FAMILY_ENV, "portable")
        qc = q.cuda()
        assert not hopper.choose(spec, qc, qc, qc, 8)


def test_unknown_family_name_is_refused():
    with pytest.raises(ValueError, match="unknown kernel family"):
        render(KernelSpec(128, False, "bfloat16", "fwd"), "blackwell")


def test_kernel_cli_prints_the_hopper_source(capsys):
    import argparse

    from flashgen.kernels import cli as kernel_cli

    parser = argparse.ArgumentParser()
    kernel_cli.add_arguments(parser)
    rc = kernel_cli.run(parser.parse_args(["--head-dim", "96", "--family", "hopper"]))
    assert rc == 2 and "no Hopper kernel" in capsys.readouterr().err
    if API is not None:
        args = ["--head-dim", "128", "--dtype", "bfloat16", "--causal", "--family", "hopper"]
        assert kernel_cli.run(parser.parse_args(args)) == 0
        assert "def attn_fwd_ws(" in capsys.readouterr().out


# ---- ahead-of-time compilation for sm_90 (CPU) -------------------------------------------


# Configs compiled ahead of time: the shipped ones (both causal modes) and one of each other
# consumer layout the fit model admits (hd128 64-key tiles with 3 slots; hd64 three consumers,
# one 8-warp consumer), so the byte model and the register model are checked across the space.
AOT_CONFIGS = [
    (64, "shipped"), (128, "shipped"),
    (128, (128, 64, 3, 2, 4, 168, False)),
    (64, (192, 64, 3, 3, 4, 128, False)),
    (64, (128, 128, 2, 1, 8, 168, False)),
]  # fmt: skip

_AOT_SCRIPT = """
import json, sys
from flashgen.kernels import hopper
from flashgen.core.spec import KernelSpec
from flashgen.core.hopper_config import HopperConfig
out = {}
for head_dim, cfg in json.loads(sys.argv[1]):
    cfg = hopper.CONFIGS[head_dim] if cfg == "shipped" else HopperConfig(*cfg)
    for causal in ((False, True) if cfg == hopper.CONFIGS[head_dim] else (False,)):
        spec = KernelSpec(head_dim, causal, "bfloat16", "fwd")
        res = hopper.compile_for_sm90(spec, cfg)
        out[f"{spec.uri()} {cfg.short()}"] = dict(res, model=cfg.shared_bytes(head_dim),
                                                  spills=hopper.ptxas_spills(res["ptx"]))
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def aot_results():
    """The AOT configs compiled for sm_90, in a child process without TRITON_INTERPRET
    (conftest sets it for this one, and Gluon's jit helpers imported under it cannot compile)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", _AOT_SCRIPT, json.dumps(AOT_CONFIGS)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _gluon_aot_available() -> str | None:
    if API is None:
        return API_REASON
    try:
        from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401
    except ImportError as exc:
        return f"this Triton cannot compile Gluon ahead of time ({exc})"
    return None


@pytest.mark.skipif(_gluon_aot_available() is not None, reason=str(_gluon_aot_available()))
def test_compiles_for_sm90_and_fits_the_models(aot_results):
    from flashgen.hardware.sram import KNOWN_GPUS

    assert len(aot_results) == 2 * 2 + 3
    for name, result in aot_results.items():
        ptx = result["ptx"]
        # Warp specialisation really happened: registers move from the loader to the consumers.
        assert re.search(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+40;", ptx), name
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, name
        real, model = result["shared"], result["model"]
        # The compiler adds only alignment padding to the explicit allocations.
        assert model <= real < model + 1024, (name, real, model)
        assert real <= KNOWN_GPUS["nvidia-h200"].smem_optin_bytes
        # Every config here passes the register model, and ptxas (where Triton ships it) agrees.
        if result["spills"] is not None:
            assert result["spills"] == 0, name


def test_aot_configs_pass_the_fit_model():
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.hardware.hopper_tiles import fit_reason
    from flashgen.hardware.sram import KNOWN_GPUS

    for head_dim, cfg in AOT_CONFIGS:
        cfg = hopper.CONFIGS[head_dim] if cfg == "shipped" else HopperConfig(*cfg)
        assert fit_reason(cfg, head_dim, KNOWN_GPUS["nvidia-h200"]) is None, cfg


# ---- numerics on the GPU -----------------------------------------------------------------


def _qkv(b, hq, hkv, sq, sk, d, dtype, *, seed=0, layout="bhsd"):
    gen = torch.Generator().manual_seed(seed)

    def rand(h, s):
        if layout == "bshd":  # [B, S, H, D] storage viewed as [B, H, S, D]: strided heads
            return torch.randn(b, s, h, d, generator=gen).to(dtype).cuda().transpose(1, 2)
        return torch.randn(b, h, s, d, generator=gen).to(dtype).cuda()

    return rand(hq, sq), rand(hkv, sk), rand(hkv, sk)


GPU_CASES = [
    # (B, Hq, Hkv, Sq, Sk, D, dtype, causal, layout)
    (2, 4, 4, 1000, 1000, 128, torch.bfloat16, False, "bhsd"),
    (2, 4, 4, 1000, 1000, 128, torch.bfloat16, True, "bhsd"),
    (1, 8, 2, 777, 777, 128, torch.float16, True, "bhsd"),  # GQA 4, odd length
    (1, 4, 4, 129, 300, 128, torch.bfloat16, False, "bhsd"),  # more keys than queries
    (1, 4, 4, 300, 129, 128, torch.bfloat16, True, "bhsd"),  # causal, fewer keys
    (2, 4, 4, 513, 513, 128, torch.bfloat16, True, "bshd"),  # strided heads
    (1, 2, 2, 1, 1, 128, torch.float16, True, "bhsd"),
    (2, 4, 2, 1000, 1000, 64, torch.bfloat16, True, "bhsd"),  # d64 (forced only)
    (1, 4, 4, 257, 1031, 64, torch.float16, False, "bhsd"),
]


@pytest.mark.gpu
@needs_sm90
@needs_gluon
@pytest.mark.parametrize(
    "case", GPU_CASES, ids=lambda c: "-".join(map(str, c)).replace("torch.", "")
)
def test_hopper_forward_matches_float64(case, monkeypatch):
    from flashgen.kernels.fwd import forward

    b, hq, hkv, sq, sk, d, dtype, causal, layout = case
    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    q, k, v = _qkv(b, hq, hkv, sq, sk, d, dtype, layout=layout)
    spec = KernelSpec(d, causal, str(dtype).removeprefix("torch."), "fwd")
    assert hopper.choose(spec, q, k, v, sq)  # this test must not silently run the portable one
    out, lse = forward(q, k, v, causal=causal, scale=None)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal)
    sdpa_err = max_abs_err(sdpa_same_dtype(q, k, v, causal=causal), ref_out)
    _, atol = tolerance(dtype, sdpa_err)
    assert out.is_contiguous() and torch.isfinite(out).all()
    err = max_abs_err(out, ref_out)
    assert err <= atol, f"out err {err:.3e} > {atol:.3e} (sdpa {sdpa_err:.3e})"
    lse_err = (lse.double() - ref_lse).abs().max().item()
    assert lse_err <= 1e-4 + 1e-5 * ref_lse.abs().max().item(), lse_err


# Launch layouts beyond the shipped ones, persistent grids with several work items per
# program (4 x 16 heads x 8 query blocks = 512 items > 132 SMs), GQA, odd lengths.
LAYOUT_CASES = [
    # (head_dim, HopperConfig fields, causal, (B, Hq, Hkv, Sq, Sk))
    (128, (128, 128, 2, 2, 4, 168, False, True), True, (4, 16, 4, 1000, 1000)),
    (128, (128, 128, 2, 2, 4, 168, False, True), False, (3, 16, 16, 777, 801)),
    (128, (128, 128, 2, 2, 4, 168, True, True), True, (4, 16, 16, 1000, 1000)),
    (128, (128, 64, 3, 2, 4, 168, False, True), True, (2, 8, 8, 1500, 1500)),
    (64, (192, 64, 3, 3, 4, 128, False, False), True, (2, 8, 2, 1000, 1000)),
    (64, (192, 64, 3, 3, 4, 128, False, True), False, (4, 16, 16, 1000, 1000)),
    (64, (64, 128, 3, 1, 4, 128, False, True), True, (4, 16, 4, 1000, 1000)),
    (64, (128, 128, 2, 1, 8, 168, False, False), True, (1, 4, 4, 300, 129)),
]


@pytest.mark.gpu
@needs_sm90
@needs_gluon
@pytest.mark.parametrize("case", LAYOUT_CASES, ids=lambda c: f"d{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_layouts_and_persistent_grid_match_float64(case):
    from flashgen.core.hopper_config import HopperConfig

    d, fields, causal, (b, hq, hkv, sq, sk) = case
    cfg = HopperConfig(*fields)
    q, k, v = _qkv(b, hq, hkv, sq, sk, d, torch.bfloat16, seed=2)
    out = torch.empty_like(q)
    lse = torch.empty(b, hq, sq, device=q.device, dtype=torch.float32)
    spec = KernelSpec(d, causal, "bfloat16", "fwd")
    hopper.forward(q, k, v, out, lse, scale=d**-0.5, spec=spec, config=cfg)
    ref_out, ref_lse = attention_ref(q, k, v, causal=causal)
    _, atol = tolerance(
        torch.bfloat16, max_abs_err(sdpa_same_dtype(q, k, v, causal=causal), ref_out)
    )
    assert max_abs_err(out, ref_out) <= atol
    assert (lse.double() - ref_lse).abs().max().item() <= 1e-4 + 1e-5 * ref_lse.abs().max().item()


@pytest.mark.gpu
@needs_sm90
@needs_gluon
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_consumes_the_hopper_forward(causal, monkeypatch):
    """Autograd through the public op with the Hopper forward: the portable backward reads its
    out and LSE, and the gradients match float64 within SDPA's own bf16 error."""
    from flashgen.ops import attention

    monkeypatch.setenv(hopper.FAMILY_ENV, "hopper")
    q, k, v = _qkv(1, 4, 2, 300, 300, 128, torch.bfloat16, seed=1)
    do = torch.randn_like(q)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    attention(*leaves, causal=causal).backward(do)
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    attention_ref(*ref, causal=causal)[0].backward(do.double())
    eager = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*eager, causal=causal).backward(do)
    for name, got, want, same in zip("qkv", leaves, ref, eager, strict=True):
        err = max_abs_err(got.grad, want.grad)
        bound = 3.0 * max_abs_err(same.grad, want.grad) + 8e-3 * max(
            1.0, want.grad.abs().max().item()
        )
        assert err <= bound, f"d{name}: {err:.3e} > {bound:.3e}"


@pytest.mark.gpu
@needs_sm90
@needs_gluon
def test_auto_choice_on_sm90(monkeypatch):
    """Without FLASHGEN_FWD_FAMILY, head dim 128 takes the Hopper kernel except short causal;
    head dim 64 and misaligned tensors keep the portable one."""
    monkeypatch.delenv(hopper.FAMILY_ENV, raising=False)
    d128 = KernelSpec(128, False, "bfloat16", "fwd")
    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16, device="cuda")
    assert hopper.choose(d128, q, q, q, 256)
    assert not hopper.choose(KernelSpec(128, True, "bfloat16", "fwd"), q, q, q, 256)
    assert hopper.choose(KernelSpec(128, True, "bfloat16", "fwd"), q, q, q, 4096)
    q64 = torch.zeros(1, 2, 256, 64, dtype=torch.bfloat16, device="cuda")
    assert not hopper.choose(KernelSpec(64, False, "bfloat16", "fwd"), q64, q64, q64, 256)
    odd = torch.zeros(1 * 2 * 256 * 128 + 1, dtype=torch.bfloat16, device="cuda")[1:]
    odd = odd.view(1, 2, 256, 128)
    assert not hopper.choose(d128, odd, odd, odd, 256)
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "0")
    assert not hopper.choose(d128, q, q, q, 256)
