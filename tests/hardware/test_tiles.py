"""The search space: static rules, pruning on real budgets, the empty-space error, defaults."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.hardware import tiles as space
from flashgen.hardware.sram import KNOWN_GPUS, fits, smem_bytes

A10 = KNOWN_GPUS["nvidia-a10"]  # sm86, 99 KB
H200 = KNOWN_GPUS["nvidia-h200"]  # sm90, 227 KB
SPECS = [
    KernelSpec(d, causal, dtype, direction)
    for d, causal, dtype, direction in itertools.product(
        (16, 64, 80, 128, 256), (False, True), ("float16", "bfloat16", "float32"), ("fwd", "bwd")
    )
]
SPEC_IDS = [s.uri() for s in SPECS]


def test_candidates_follow_the_static_rules():
    spec = KernelSpec(128, True, "bfloat16", "fwd")
    cands = space.candidates(spec)
    assert len(cands) == len(set(cands)) > 100
    for c in cands:
        assert c.block_m in space.BLOCK_CHOICES and c.block_n in space.BLOCK_CHOICES
        assert c.num_warps in space.WARP_CHOICES and c.num_stages in space.STAGE_CHOICES
        assert c.block_m * c.block_n >= 4 * 32 * c.num_warps
    # The H200 grid's winners are candidates; a hopeless spiller is not.
    for best in [(128, 64, 4, 2), (64, 64, 4, 3), (128, 128, 8, 3)]:
        assert TileConfig(*best) in cands
    assert TileConfig(256, 256, 2, 2) not in cands
    assert TileConfig(16, 16, 8, 2) not in cands
    assert space.candidates(spec) == cands  # deterministic order


@pytest.mark.parametrize("device", [A10, H200], ids=["sm86-99KB", "sm90-227KB"])
def test_pruning_respects_the_budget(device):
    spec = KernelSpec(128, False, "float16", "fwd")
    kept = space.pruned(spec, device)
    assert kept and set(kept) <= set(space.candidates(spec))
    for c in space.candidates(spec):
        inside = smem_bytes(spec, c, device.capability) <= device.smem_optin_bytes
        assert (c in kept) == inside


def test_pruning_known_configs():
    spec = KernelSpec(128, True, "bfloat16", "fwd")
    h200, a10 = set(space.pruned(spec, H200)), set(space.pruned(spec, A10))
    assert TileConfig(128, 128, 8, 3) in h200
    assert TileConfig(64, 128, 4, 4) not in h200  # failed with OutOfResources on the H200
    assert TileConfig(128, 128, 8, 3) not in a10  # 163,840+ bytes > 101,376
    assert TileConfig(128, 64, 4, 3) in a10  # 2 x 32768 + 32768 (+1024) on the Ampere path
    assert len(a10) < len(h200)


def test_empty_space_raises_naming_spec_and_limit():
    tiny = dataclasses.replace(H200, name="tiny", smem_optin_bytes=4096)
    spec = KernelSpec(256, False, "float32", "bwd")
    with pytest.raises(space.NoConfigFits, match="attn_bwd_d256_full_f32.*4096") as info:
        space.pruned(spec, tiny)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_safe_config_fits_every_known_gpu(spec):
    cfg = space.safe_config(spec)
    assert cfg in space.candidates(spec)
    for slug, device in KNOWN_GPUS.items():
        if (spec.direction, spec.head_dim, spec.dtype, slug) == (
            "bwd",
            256,
            "float32",
            "nvidia-t4",
        ):
            # The documented exception: K, V, Q, dO tiles alone are 64 KB at 16 rows; the
            # compiler needs exactly 65,536 B, the model a little more. Smallest config there.
            assert cfg == min(space.candidates(spec), key=lambda c: (smem_bytes(spec, c), c))
            continue
        assert fits(spec, cfg, device), slug


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_defaults_fit_their_gpu(spec):
    for slug, device in KNOWN_GPUS.items():
        cfg = space.default_config(spec, device)
        assert cfg in space.candidates(spec), slug
        assert fits(spec, cfg, device) or cfg == space.safe_config(spec), slug


def test_defaults_follow_the_h200_measurements():
    hd128 = KernelSpec(128, False, "bfloat16", "fwd")
    assert space.default_config(hd128, H200) == TileConfig(128, 64, 4, 2)
    assert space.default_config(KernelSpec(128, True, "bfloat16", "fwd"), H200) == TileConfig(
        64, 64, 4, 3
    )
    assert space.default_config(KernelSpec(64, False, "float16", "fwd"), H200) == TileConfig(
        64, 128, 4, 2
    )
    # the backward's dK/dV kernel alone, B2 sweep (benchmarks/RESULTS.md)
    assert space.default_config(KernelSpec(128, False, "bfloat16", "bwd"), H200) == TileConfig(
        64, 128, 8, 3
    )
    assert space.default_config(KernelSpec(64, True, "bfloat16", "bwd"), H200) == TileConfig(
        64, 64, 4, 3
    )


def test_window_and_mask_specs_take_their_own_rows_on_the_h200():
    """Specs whose only mask kind is a window or a mask tensor try their measured rows first
    (session 13, benchmarks/masked_tiles.py): the windows' dK/dV kernel (32, 64, 4, 3) with
    its dQ kernel on (64, 64, 4, 2) either causality; a mask tensor's forward (128, 64, 8, 3).
    A combination (window and softcap) and other GPUs keep the general rows."""
    from flashgen.hardware.dq_tiles import dq_config

    for causal in (False, True):
        window = KernelSpec(128, causal, "bfloat16", "bwd", window=True)
        cfg = space.default_config(window, H200)
        assert cfg == TileConfig(32, 64, 4, 3)
        assert dq_config(window, cfg, (9, 0)) == TileConfig(64, 64, 4, 2)
        for kind in ("bool", "add"):
            masked = KernelSpec(128, causal, "bfloat16", "fwd", attn_mask=kind)
            assert space.default_config(masked, H200) == TileConfig(128, 64, 8, 3)
        both = KernelSpec(128, causal, "bfloat16", "bwd", window=True, softcap=True)
        plain = KernelSpec(128, causal, "bfloat16", "bwd")
        assert space.default_config(both, H200) == space.default_config(plain, H200)
        a100 = KNOWN_GPUS["nvidia-a100"]
        assert space.default_config(window, a100) == space.default_config(plain, a100)


def test_defaults_file_rejects_an_unknown_variant(tmp_path):
    path = tmp_path / "defaults.csv"
    path.write_text("gpu_class,direction,causal,block_d,configs,variant\n"
                    "sm90,fwd,both,128,64x64x4x2,windows\n")  # fmt: skip
    with pytest.raises(ValueError, match="unknown variant 'windows'"):
        space._read_defaults(path)
    path.write_text("gpu_class,direction,causal,block_d,configs\nsm90,fwd,true,64,64x64x4x2\n")
    assert space._read_defaults(path) == {
        ("sm90", "fwd", True, 64, ""): (TileConfig(64, 64, 4, 2),)
    }


def test_default_config_uses_the_current_device(monkeypatch):
    spec = KernelSpec(128, False, "float16", "fwd")
    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-t4")
    assert space.default_config(spec) == space.default_config(spec, KNOWN_GPUS["nvidia-t4"])
    monkeypatch.setenv("FLASHGEN_SMEM_BYTES", "40000")
    cfg = space.default_config(spec)
    assert smem_bytes(spec, cfg, (7, 5)) <= 40000
    monkeypatch.setenv("FLASHGEN_SMEM_BYTES", "1000")  # nothing fits: smallest, no exception
    assert space.default_config(spec) == TileConfig(16, 16, 2, 1)


def test_an_additive_key_padding_masks_dq_kernel_runs_the_measured_config():
    """Non-causal, an additive key-padding mask (per_key: one vector of keys a tile) runs the
    dQ kernel on SM90_DQ as a boolean one does; a full additive tensor keeps the backward
    config (its bias tiles, 4 bytes a score, would not fit beside SM90_DQ's), and so does
    any causal mask."""
    from flashgen.hardware.dq_tiles import SM90_DQ, dq_config

    cfg = TileConfig(64, 128, 8, 3)
    for kind in ("bool", "add"):
        spec = KernelSpec(128, False, "bfloat16", "bwd", lengths=True, attn_mask=kind)
        assert dq_config(spec, cfg, (9, 0), per_key=True) == SM90_DQ[128]
        want = SM90_DQ[128] if kind == "bool" else cfg
        assert dq_config(spec, cfg, (9, 0)) == want
        causal = KernelSpec(128, True, "bfloat16", "bwd", lengths=True, attn_mask=kind)
        assert dq_config(causal, cfg, (9, 0), per_key=True) == cfg
    assert dq_config(spec, cfg, (8, 0), per_key=True) == cfg  # no measured config off sm_90
