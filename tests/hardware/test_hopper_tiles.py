"""The Hopper family's knob space and fit model (flashgen.hardware.hopper_tiles)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from flashgen.core.hopper_config import HopperConfig
from flashgen.hardware import hopper_tiles as ht
from flashgen.hardware.sram import KNOWN_GPUS

H200 = KNOWN_GPUS["nvidia-h200"]


def test_space_holds_the_shipped_configs():
    from flashgen.kernels.hopper import CONFIGS

    for dim, cfg in CONFIGS.items():
        assert cfg in ht.candidates(dim)
        assert cfg.with_persistent() in ht.candidates(dim)
        assert ht.fit_reason(cfg, dim, H200) is None


def test_fit_reasons():
    big = HopperConfig(128, 128, 4, 2, 4, 168, False)  # 4 slots of 128 x 128 K and V: 327 KB
    assert "shared memory" in ht.fit_reason(big, 128, H200)
    # Three consumers at 160 registers cannot hold a 64 x 128 score tile, its P and a 64 x 64
    # O tile (head dim 64: 139 KB of shared memory, which fits).
    crowded = HopperConfig(192, 128, 2, 3, 4, 128, False)
    assert "registers" in ht.fit_reason(crowded, 64, H200)
    a100 = replace(H200, capability=(8, 0))
    assert "sm_90" in ht.fit_reason(HopperConfig(128, 128, 2, 2, 4, 168, False), 128, a100)


@pytest.mark.parametrize("mma", [False, True])
def test_alibi_key_indices_fit_wherever_the_config_fits(mma):
    """An ALiBi rendering fits every config that fits without ALiBi: its key indices (a float
    a key of the tile, and with the per-key term on the tensor cores 16 B-operand elements a key
    too) take less than the O staging tiles it does without (O is staged in the item's Q
    buffer), the compiler's alignment padding (under 1 KB, tests/kernels/test_hopper.py)
    included."""
    for dim in (64, 128):
        for cfg in ht.candidates(dim):
            if ht.fit_reason(cfg, dim, H200) is None:
                assert ht.fit_reason(cfg, dim, H200, alibi=True, alibi_mma=mma) is None, cfg
                need = cfg.shared_bytes(dim, alibi=True, alibi_mma=mma)
                extra = (4 + 16 * 2 * mma) * cfg.block_n - cfg.block_m * dim * 2
                assert need - cfg.shared_bytes(dim) == extra < 0
                assert need + 1024 <= H200.smem_optin_bytes, cfg
    # the table only where the rendering has ALiBi
    cfg = ht.candidates(128)[0]
    assert cfg.shared_bytes(128, alibi_mma=True) == cfg.shared_bytes(128)


def test_programs_per_sm():
    assert ht.programs_per_sm(HopperConfig(128, 128, 2, 2, 4, 168, False), 128) == 1
    # One 4-warp consumer capped at 128 registers, 90 KB: two programs an SM; with a third
    # ring slot (123 KB) only one fits.
    assert ht.programs_per_sm(HopperConfig(64, 128, 2, 1, 4, 128, False), 64) == 2
    assert ht.programs_per_sm(HopperConfig(64, 128, 3, 1, 4, 128, False), 64) == 1
    assert ht.programs_per_sm(HopperConfig(64, 64, 2, 1, 4, 128, False), 64) == 2  # registers bind


def test_every_candidate_is_valid_and_some_fit():
    for dim in (64, 128):
        cands = ht.candidates(dim)
        assert len(set(cands)) == len(cands)
        fit = ht.fitting(dim, H200)
        assert fit and len(fit) < len(cands)


def _write(path, records, fmt=ht.CONFIGS_FORMAT):
    import json

    path.write_text(json.dumps({"format": fmt, "records": records}))
    ht._table.cache_clear()
    return str(path)


def test_tuned_config_from_a_file(tmp_path, monkeypatch):
    fast = dict(block_m=128, block_n=64, num_buf=3, consumers=2, num_warps=4, maxnreg=168,
                pingpong=False, persistent=True)  # fmt: skip
    short = dict(fast, block_n=128, num_buf=2)
    monkeypatch.setenv(ht.CONFIGS_ENV, _write(tmp_path / "h.json", [
        dict(head_dim=128, causal=True, seq_bucket=1024, config=short),
        dict(head_dim=128, causal=True, seq_bucket=16384, config=fast),
    ]))  # fmt: skip
    got = ht.tuned_config(128, True, 1000, H200)
    assert got == HopperConfig(**short)
    assert ht.tuned_config(128, True, 9000, H200) == HopperConfig(**fast)  # nearer 16k than 1k
    assert ht.tuned_config(128, True, 4096, H200) == HopperConfig(**fast)  # tie: the longer
    assert ht.tuned_config(128, False, 1000, H200) is None  # no record for the mask
    assert ht.tuned_config(64, True, 1000, H200) is None


def test_a_bad_configs_file_is_ignored_with_a_warning(tmp_path, monkeypatch, caplog):
    bad = dict(block_m=128, block_n=64, num_buf=3, consumers=2, num_warps=4, maxnreg=170,
               pingpong=False)  # fmt: skip
    for path in (
        _write(tmp_path / "a.json", [dict(head_dim=128, causal=True, seq_bucket=1024, config=bad)]),
        _write(tmp_path / "b.json", [], fmt="other"),
        _write(
            tmp_path / "c.json", [dict(head_dim="128", causal=True, seq_bucket=1024, config={})]
        ),
    ):
        monkeypatch.setenv(ht.CONFIGS_ENV, path)
        caplog.clear()
        assert ht.tuned_config(128, True, 1024, H200) is None
        assert "ignoring Hopper configs file" in caplog.text


def test_seq_bucket():
    assert [ht.seq_bucket(n) for n in (1, 16, 17, 1000, 1024, 1025)] == [
        16,
        16,
        32,
        1024,
        1024,
        2048,
    ]
