"""The shared-memory model: hand-computed budgets, the GPU table, device overrides, and a fast
check against the real compiler (ahead-of-time compile for sm_90 on this CPU machine)."""

from __future__ import annotations

import dataclasses

import aot_compile
import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.hardware import sram
from flashgen.hardware.sram import (
    KNOWN_GPUS,
    DeviceLimits,
    current_device,
    device_slug,
    fits,
    smem_bytes,
)

H200 = KNOWN_GPUS["nvidia-h200"]
A100 = KNOWN_GPUS["nvidia-a100"]
SM90, SM80 = (9, 0), (8, 0)


def fwd(d=128, causal=False, dtype="float16"):
    return KernelSpec(d, causal, dtype, "fwd")


def scratch(rows, loop_rows):
    return 1024 + 4 * (rows + loop_rows)


# (spec, config, capability, triton, bytes worked out by hand from the module docstring's rules)
HAND = [
    # Hopper wgmma: Q 128x128x2 = 32768; K+V per stage 2x64x128x2 = 32768, 2 stages.
    (fwd(), TileConfig(128, 64, 4, 2), SM90, 32768 + 2 * 32768 + scratch(128, 64)),
    # The H200's measured failure: BM 64, BN 128, 4 stages: 16384 + 4 x 65536 > 232,448.
    (fwd(), TileConfig(64, 128, 4, 4), SM90, 16384 + 4 * 65536 + scratch(64, 128)),
    # Ampere keeps stages - 1 buffers; P is staged because block_m (32) < block_d (128).
    (fwd(), TileConfig(32, 64, 4, 3), SM80, 2 * 32768 + 8192 + 32 * 64 * 2 + scratch(32, 64)),
    # Hopper with 2 warps takes the Ampere path.
    (fwd(64), TileConfig(128, 64, 2, 2), SM90, 1 * 16384 + 16384 + scratch(128, 64)),
    # One stage: nothing pipelined, one K (or V) tile staged beside Q.
    (fwd(64), TileConfig(64, 128, 4, 1), SM90, 8192 + 128 * 64 * 2 + scratch(64, 128)),
    # fp32 doubles every tile: 3 x (2x64x128x4) + 64x128x4.
    (
        fwd(128, dtype="float32"),
        TileConfig(64, 64, 4, 3),
        SM90,
        3 * 65536 + 32768 + scratch(64, 64),
    ),
    # head_dim 80 is padded to block_d 128.
    (fwd(80), TileConfig(128, 64, 4, 2), SM90, 32768 + 2 * 32768 + scratch(128, 64)),
    # Backward, the larger of the two kernels: dK/dV (rows = block_n = 64, wgmma) keeps K, V
    # (2 x 64x128x2) and pipelines Q, dO (2 x 128x128x2), 2 stages, plus lse and delta
    # (2 vectors x 128 x 4 B) per stage.
    (
        KernelSpec(128, False, "float16", "bwd"),
        TileConfig(128, 64, 4, 2),
        SM90,
        2 * 2 * 32768 + 2 * 128 * 4 * 2 + 2 * 16384 + scratch(64, 128),
    ),
]


@pytest.mark.parametrize(
    "spec,cfg,cap,expected",
    HAND,
    ids=[f"{s.uri()}-{c.short()}-sm{a}{b}" for s, c, (a, b), _ in HAND],
)
def test_hand_computed_budgets(spec, cfg, cap, expected):
    assert smem_bytes(spec, cfg, cap) == expected


def test_backward_dq_kernel_budget():
    # dQ kernel at (128, 64): rows = 128 (wgmma), Q and dO resident 2 x 32768, K/V 3 stages of
    # 2 x 16384: on sm_90 a 16-bit head-dim-128 dQ kernel runs its own measured config
    # (flashgen.hardware.dq_tiles: (128, 64, 8, 3)), whatever the backward config's stages.
    spec = KernelSpec(128, False, "float16", "bwd")
    per = sram.kernel_bytes(spec, TileConfig(128, 64, 4, 2), SM90)
    assert per["attn_bwd_dq"] == 2 * 32768 + 3 * 32768 + scratch(128, 64)
    assert per == sram.kernel_bytes(spec, TileConfig(128, 64, 8, 3), SM90) | {
        "attn_bwd_dkdv": per["attn_bwd_dkdv"], "attn_bwd_dkdv_tma": per["attn_bwd_dkdv_tma"]
    }  # fmt: skip
    dq_kernels = {"attn_bwd_dq", "attn_bwd_dq_tma", "attn_bwd_dq_delta", "attn_bwd_dq_delta_tma"}
    assert set(per) == {"attn_bwd_dkdv", "attn_bwd_dkdv_tma"} | dq_kernels
    assert {per[name] for name in dq_kernels} == {per["attn_bwd_dq"]}
    fp32 = KernelSpec(128, False, "float32", "bwd")  # no TMA build for fp32
    assert set(sram.kernel_bytes(fp32, TileConfig(64, 64, 4, 2), SM90)) == {
        "attn_bwd_dkdv",
        "attn_bwd_dq",
        "attn_bwd_dq_delta",
    }
    windowed = KernelSpec(128, False, "float16", "bwd", window=True)  # extras: no delta build
    assert "attn_bwd_dq_delta" not in sram.kernel_bytes(windowed, TileConfig(64, 64, 4, 2), SM90)


def test_onepass_backward_budget():
    """The one-pass backward (kind "onepass"): the dK/dV kernel's buffers plus the fp32 dQ
    partial, [block_m, D] x 4 B on the wgmma path (compiled for sm_90 with triton 3.6: 66,560
    bytes at d64 (64,64,4,2), 264,192 at d128 (128,128,8,2); benchmarks/SRAM.md)."""
    spec = KernelSpec(128, False, "bfloat16", "bwd")
    cfg = TileConfig(128, 128, 8, 2)
    split = sram.kernel_bytes(spec, cfg, SM90)
    onepass = sram.kernel_bytes(spec, cfg, SM90, "onepass")
    assert set(onepass) == {"attn_bwd_onepass", "attn_bwd_onepass_tma"}
    assert onepass["attn_bwd_onepass"] == split["attn_bwd_dkdv"] + 128 * 128 * 4
    assert fits(spec, cfg, H200) and not fits(spec, cfg, H200, "onepass")
    # one stage: the buffers are shared, nothing added; mma v2 (32 rows): 3 x rows x D x 2 B
    one = TileConfig(64, 64, 4, 1)
    assert (
        sram.kernel_bytes(spec, one, SM90, "onepass")["attn_bwd_onepass"]
        == (sram.kernel_bytes(spec, one, SM90)["attn_bwd_dkdv"])
    )
    small = TileConfig(32, 64, 4, 2)
    assert sram.kernel_bytes(spec, small, SM90, "onepass")["attn_bwd_onepass"] == (
        sram.kernel_bytes(spec, small, SM90)["attn_bwd_dkdv"] + 3 * 32 * 128 * 2
    )
    assert set(sram.kernel_bytes(spec, cfg, SM80, "onepass")) == {"attn_bwd_onepass"}


def test_config_for_kind_keeps_fitting_configs_and_replaces_the_rest():
    from flashgen.hardware.tiles import config_for_kind

    spec = KernelSpec(128, False, "bfloat16", "bwd")
    big, fitting = TileConfig(128, 128, 8, 2), TileConfig(64, 64, 4, 2)
    assert config_for_kind(spec, big, H200, "split") == big
    assert config_for_kind(spec, fitting, H200, "onepass") == fitting
    chosen = config_for_kind(spec, big, H200, "onepass")
    assert chosen != big and fits(spec, chosen, H200, "onepass")
    for gpu in KNOWN_GPUS.values():  # every GPU gets a fitting one-pass config
        for d in (64, 128, 256):
            s = KernelSpec(d, True, "float16", "bwd")
            assert fits(s, config_for_kind(s, big, gpu, "onepass"), gpu, "onepass")


def test_hopper_budgets_the_tma_and_the_pointer_kernel():
    spec = fwd()
    assert set(sram.kernel_bytes(spec, TileConfig(64, 64, 4, 2), SM90)) == {
        "attn_fwd",
        "attn_fwd_tma",
    }
    assert set(sram.kernel_bytes(spec, TileConfig(64, 64, 4, 2), SM80)) == {"attn_fwd"}


def test_worst_case_without_capability_covers_every_path():
    for cfg in (TileConfig(128, 64, 4, 2), TileConfig(32, 64, 4, 3), TileConfig(64, 64, 2, 4)):
        spec = fwd()
        assert smem_bytes(spec, cfg) == max(
            smem_bytes(spec, cfg, SM90), smem_bytes(spec, cfg, SM80)
        )


def test_h200_known_outcomes():
    """Launched on the H200 (benchmarks/RESULTS.md): hd128, BLOCK_N 128, 4 stages failed; 3 stages ran.
    Compiled ahead of time with Triton 3.6 and 3.9, our kernels need 229,376 (pointer) and
    230,400 (TMA) bytes at (128,128,8,3): in, with 1 KB to spare in the model."""
    for causal in (False, True):
        spec = fwd(128, causal, "bfloat16")
        assert not fits(spec, TileConfig(64, 128, 4, 4), H200)
        assert not fits(spec, TileConfig(128, 128, 8, 4), H200)
        assert fits(spec, TileConfig(128, 64, 4, 2), H200)
        assert fits(spec, TileConfig(128, 128, 8, 3), H200)


def test_fp32_never_smaller_than_16_bit():
    """Kernel by kernel on one config. (Not a spec's total on sm_90: there the 16-bit dQ kernel
    runs its own measured config, flashgen.hardware.dq_tiles, fp32 the backward config.)"""
    for cfg in (TileConfig(64, 64, 4, 2), TileConfig(16, 32, 2, 1), TileConfig(128, 32, 8, 5)):
        for direction in ("fwd", "bwd"):
            for cap in ((8, 0), SM90):
                half = sram.kernel_bytes(KernelSpec(64, True, "bfloat16", direction), cfg, cap)
                full = sram.kernel_bytes(KernelSpec(64, True, "float32", direction), cfg, cap)
                own_dq = cap == SM90 and direction == "bwd"
                for name, value in full.items():
                    if not (own_dq and name.startswith("attn_bwd_dq")):
                        assert value > half[name], (cfg, direction, cap, name)


def test_dq_kernel_config_table():
    """The dQ kernel's own config: sm_90, 16-bit specs of head dim 64/128, plain, or non-causal
    with a window, lengths, ALiBi, a boolean mask or dropout (measured faster there; causal
    variants, softcap and additive masks keep the backward config); a window alone at head
    dim 128 its own either way (SM90_WINDOW_DQ)."""
    from flashgen.hardware.dq_tiles import SM90_DQ, SM90_WINDOW_DQ, dq_config

    cfg = TileConfig(32, 32, 4, 1)
    for d in (64, 128):
        for dtype in ("float16", "bfloat16"):
            assert dq_config(KernelSpec(d, True, dtype, "bwd"), cfg, SM90) == SM90_DQ[d]
        assert dq_config(KernelSpec(d, True, "float32", "bwd"), cfg, SM90) == cfg
        assert dq_config(KernelSpec(d, True, "bfloat16", "bwd"), cfg, (8, 0)) == cfg
        assert dq_config(KernelSpec(d, True, "bfloat16", "bwd"), cfg, (10, 0)) == cfg
        assert dq_config(KernelSpec(d, True, "bfloat16", "bwd"), cfg, None) == cfg
        for extra in (
            {"window": True}, {"lengths": True}, {"alibi": True}, {"attn_mask": "bool"},
            {"dropout": True},
        ):  # fmt: skip
            spec = KernelSpec(d, False, "bfloat16", "bwd", **extra)
            causal = KernelSpec(d, True, "bfloat16", "bwd", **extra)
            if "window" in extra and d in SM90_WINDOW_DQ:
                assert dq_config(spec, cfg, SM90) == SM90_WINDOW_DQ[d]
                assert dq_config(causal, cfg, SM90) == SM90_WINDOW_DQ[d]
                continue
            assert dq_config(spec, cfg, SM90) == SM90_DQ[d]
            assert dq_config(causal, cfg, SM90) == cfg
        for extra in ({"attn_mask": "add"}, {"softcap": True}):
            assert dq_config(KernelSpec(d, False, "bfloat16", "bwd", **extra), cfg, SM90) == cfg
    assert dq_config(KernelSpec(96, True, "bfloat16", "bwd"), cfg, SM90) == cfg


def test_known_gpu_table():
    expected = {
        "nvidia-h200": ((9, 0), 132, 232_448),
        "nvidia-h100": ((9, 0), 132, 232_448),
        "nvidia-a100": ((8, 0), 108, 166_912),
        "nvidia-a10": ((8, 6), 72, 101_376),
        "nvidia-l4": ((8, 9), 58, 101_376),
        "nvidia-l40": ((8, 9), 142, 101_376),
        "nvidia-rtx-4090": ((8, 9), 128, 101_376),
        "nvidia-t4": ((7, 5), 40, 65_536),
    }
    for slug, (cap, sms, smem) in expected.items():
        d = KNOWN_GPUS[slug]
        assert (d.capability, d.sm_count, d.smem_optin_bytes) == (cap, sms, smem), slug
    for slug, d in KNOWN_GPUS.items():
        assert device_slug(d) == slug
        assert d.smem_optin_bytes > 48 * 1024  # never the 48 KB non-opt-in default
        assert d.regs_per_sm == 65536 and d.max_regs_per_thread == 255
        with pytest.raises(dataclasses.FrozenInstanceError):
            d.sm_count = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "name,slug",
    [
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100"),
        ("NVIDIA A100 80GB PCIe", "nvidia-a100"),
        ("NVIDIA H100 PCIe", "nvidia-h100"),
        ("Tesla T4", "nvidia-t4"),
        ("NVIDIA L40S", "nvidia-l40s"),
        ("NVIDIA GeForce RTX 4090", "nvidia-rtx-4090"),
        ("NVIDIA RTX 6000 Ada Generation", "nvidia-rtx-6000-ada-generation"),
    ],
)
def test_device_slug(name, slug):
    assert device_slug(DeviceLimits(name, (8, 9), 1, 101_376)) == slug


def test_current_device_overrides(monkeypatch):
    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-a100")
    assert current_device() == A100
    monkeypatch.setenv("FLASHGEN_SMEM_BYTES", "101376")
    d = current_device()
    assert d.capability == (8, 0) and d.smem_optin_bytes == 101_376
    monkeypatch.setenv("FLASHGEN_SMEM_BYTES", "lots")
    with pytest.raises(ValueError, match="FLASHGEN_SMEM_BYTES"):
        current_device()
    monkeypatch.delenv("FLASHGEN_SMEM_BYTES")
    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-b9000")
    with pytest.raises(ValueError, match="nvidia-h200"):
        current_device()


def test_current_device_without_cuda_plans_for_h200(monkeypatch):
    monkeypatch.delenv("FLASHGEN_GPU", raising=False)
    monkeypatch.delenv("FLASHGEN_SMEM_BYTES", raising=False)
    if sram._cuda_device() is not None:
        d = current_device()
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        assert d.smem_optin_bytes == props.shared_memory_per_block_optin
    else:
        assert current_device() == H200


def test_reg_estimate_grows_with_tiles_and_shrinks_with_warps():
    spec = fwd()
    small = sram.reg_estimate(spec, TileConfig(64, 64, 4, 2))
    big = sram.reg_estimate(spec, TileConfig(128, 128, 4, 2))
    assert big > small
    assert sram.reg_estimate(spec, TileConfig(128, 128, 8, 2)) < big


# A fast subset of benchmarks/sram_vs_compiler.py: a handful of ahead-of-time compiles of the real
# generated kernels (no GPU needed). Configs next to the limits, where a wrong model would show.
AOT_JOBS = [
    ((128, False, "float16", "fwd"), (64, 128, 4, 4), 90),  # failed on the H200: must not fit
    ((128, True, "float16", "fwd"), (128, 128, 8, 3), 90),  # fits with ~2 KB to spare
    ((64, False, "float16", "fwd"), (32, 64, 2, 3), 90),  # Ampere path on Hopper
    ((128, False, "float16", "fwd"), (128, 64, 4, 4), 80),  # A100: 3 x 32768 + 32768 fits
    ((64, True, "float16", "bwd"), (64, 64, 4, 2), 90),
    ((64, False, "float16", "onepass"), (64, 64, 4, 2), 90),  # the one-pass backward kind
    # dropout (KernelSpec's fields in order: window, softcap, lengths, attn_mask, dropout),
    # whose draw the model counts as no shared memory (a hash in registers; compiled for sm_90
    # with triton 3.6 and 3.9 a dropout kernel took the plain kernel's bytes at every config
    # tried): non-causal, the dQ kernel on its own (128, 64, 8, 3); causal, on the dK/dV config
    ((128, False, "bfloat16", "bwd", False, False, False, "", True), (64, 128, 8, 3), 90),
    ((128, True, "bfloat16", "bwd", False, False, False, "", True), (64, 128, 8, 3), 90),
]
_AOT_SCRIPT = """
import json, sys
sys.path.insert(0, "benchmarks")
from sram_vs_compiler import compile_job
print(json.dumps([compile_job(tuple(j))[1] for j in json.loads(sys.argv[1])]))
"""


@pytest.mark.skipif(
    not aot_compile.cuda_backend_available(), reason="Triton's CUDA backend is not installed"
)
def test_model_never_underestimates_the_compiler():
    results = aot_compile.run_without_interpreter(_AOT_SCRIPT, AOT_JOBS)
    limits = {90: H200, 80: A100}
    for (spec_t, cfg_t, cap), result in zip(AOT_JOBS, results, strict=True):
        assert "error" not in result, result
        kind = "onepass" if spec_t[3] == "onepass" else "split"
        spec = KernelSpec(*spec_t[:3], "bwd") if kind == "onepass" else KernelSpec(*spec_t)
        cfg, device = TileConfig(*cfg_t), limits[cap]
        model = sram.kernel_bytes(spec, cfg, device.capability, kind)
        assert set(model) == set(result["per_kernel"])
        for name, actual in result["per_kernel"].items():
            assert actual <= model[name] <= actual + 8192, (spec.uri(), cfg, name)
        compiler_fits = max(result["per_kernel"].values()) <= device.smem_optin_bytes
        assert fits(spec, cfg, device, kind) == compiler_fits, (spec.uri(), cfg)


def test_mask_tensor_tile_is_counted_in_the_backward():
    """Seen on the H200 (triton 3.6): the split backward with a bool mask tensor at head dim 128,
    (64, 128, 8, 3), needed 246,784 B of shared memory (limit 232,448) and failed to launch
    while the model, without the mask's pipelined tile, said 231,168 B. The mask tile is
    counted now, so that config no longer fits and a smaller one is chosen. (That was its dQ
    kernel, on the dK/dV kernel's config; a plain boolean mask's dQ kernel now runs its own
    (128, 64, 8, 3), `flashgen.hardware.dq_tiles`, where the mask tile fits: softcap keeps the
    old pairing.)"""
    from flashgen.core.config import TileConfig
    from flashgen.core.spec import KernelSpec
    from flashgen.hardware import sram

    cfg = TileConfig(64, 128, 8, 3)
    plain = KernelSpec(128, False, "bfloat16", "bwd")
    assert sram.smem_bytes(plain, cfg, (9, 0)) <= 232448
    for extra in ({"attn_mask": "add"}, {"attn_mask": "bool", "softcap": True}):
        masked = KernelSpec(128, False, "bfloat16", "bwd", **extra)
        assert sram.smem_bytes(masked, cfg, (9, 0)) >= 246784
    own_dq = KernelSpec(128, False, "bfloat16", "bwd", attn_mask="bool")
    assert sram.smem_bytes(own_dq, cfg, (9, 0)) <= 232448
    # per element: the additive mask is counted at 4 bytes, the boolean at 1 (softcap: both
    # dQ kernels on the same config)
    b, a = (
        sram.smem_bytes(
            KernelSpec(64, True, "bfloat16", "bwd", attn_mask=kind, softcap=True),
            TileConfig(64, 64, 4, 2),
            (9, 0),
        )
        for kind in ("bool", "add")
    )
    assert a > b
