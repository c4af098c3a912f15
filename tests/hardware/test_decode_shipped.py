"""The shipped decode configs file (tuning_db/decode/nvidia-h200.json): valid, and what the run
time takes on an H200 for its buckets when no FLASHGEN_DECODE_CONFIGS overrides it.

The file is data measured on the GPU (`python -m flashgen.tune.decode --space near`, batch B2:
benchmarks/raw/h200_decode2/); read here the way the library reads it, on the CPU with the H200
as the modelled device, so a record that stops validating or stops being found fails here rather
than as a logged warning on the GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashgen.hardware import decode as hw
from flashgen.hardware.configs_files import configs_file
from flashgen.hardware.sram import KNOWN_GPUS

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "tuning_db" / "decode" / "nvidia-h200.json"
H200 = KNOWN_GPUS["nvidia-h200"]


@pytest.fixture
def on_h200(monkeypatch):
    monkeypatch.delenv(hw.CONFIGS_ENV, raising=False)
    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-h200")
    hw._table.cache_clear()
    hw.default_config.cache_clear()
    yield
    hw._table.cache_clear()
    hw.default_config.cache_clear()


def test_the_file_is_found_for_the_h200(on_h200):
    assert configs_file(hw.CONFIGS_ENV, "decode", H200).resolve() == SHIPPED.resolve()


def test_every_record_validates_fits_and_is_what_runs(on_h200):
    doc = json.loads(SHIPPED.read_text())
    assert doc["format"] == hw.CONFIGS_FORMAT
    keys = set()
    for rec in doc["records"]:
        b, kv = rec["bucket"]
        key = (rec["head_dim"], rec["dtype"], rec["hkv"], rec["group"], b, kv)
        assert key not in keys, f"two records for {key}"
        keys.add(key)
        assert (b, kv) == hw.decode_bucket(b, kv)
        cfg = hw.DecodeConfig(**rec["config"])  # ints in range, or FieldError
        block_m = hw.row_block(rec["group"], 1)
        assert hw.fits(rec["head_dim"], rec["dtype"], cfg, block_m, H200), cfg
        assert cfg.num_splits <= max(1, kv // hw.MIN_KEYS_PER_SPLIT)
        # A shape inside the bucket (not only its corner) runs the measured config.
        got = hw.default_config(
            rec["head_dim"], rec["dtype"], b, rec["hkv"], rec["group"], 1, kv * 3 // 4 + 1
        )
        assert got == cfg, key
    # The grid of benchmarks/decode.py at head dim 128: GQA 32/8 and MHA 32/32, batch 1/8/64,
    # 2k/8k/64k keys: every bucket measured.
    want = {(128, "bfloat16", hkv, 32 // hkv, b, kv)
            for hkv in (8, 32) for b in (1, 8, 64) for kv in (2048, 8192, 65536)}  # fmt: skip
    assert want <= keys
