"""The shipped Hopper configs file (tuning_db/hopper/nvidia-h200.json): valid, and what the run
time launches on an H200 when no FLASHGEN_HOPPER_CONFIGS overrides it.

The file is data measured on the GPU (benchmarks/hopper_pick.py of a hopper_probe.py bench);
these tests read it the way the library does, on the CPU, with the H200 as the modelled device
(FLASHGEN_GPU), so a record that stops validating or stops being found fails here, not at run
time on the GPU (where a bad file is only a logged warning and the built-in configs run).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flashgen.core.hopper_config import HopperConfig
from flashgen.core.spec import KernelSpec
from flashgen.hardware import hopper_tiles as ht
from flashgen.hardware.configs_files import configs_file
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.kernels import hopper

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "tuning_db" / "hopper" / "nvidia-h200.json"
H200 = KNOWN_GPUS["nvidia-h200"]


def _records():
    return json.loads(SHIPPED.read_text())["records"]


@pytest.fixture
def on_h200(monkeypatch):
    """The run time's view on an H200: the modelled device, no configs-file override."""
    monkeypatch.delenv(ht.CONFIGS_ENV, raising=False)
    monkeypatch.setenv("FLASHGEN_GPU", "nvidia-h200")
    ht._table.cache_clear()
    yield
    ht._table.cache_clear()


def test_the_file_is_found_for_the_h200(on_h200):
    assert configs_file(ht.CONFIGS_ENV, "hopper", H200).resolve() == SHIPPED.resolve()


def test_every_record_validates_and_fits_the_h200():
    doc = json.loads(SHIPPED.read_text())
    assert doc["format"] == ht.CONFIGS_FORMAT
    keys = set()
    for rec in doc["records"]:
        key = (rec["head_dim"], rec["causal"], rec["seq_bucket"])
        assert key not in keys, f"two records for {key}"
        keys.add(key)
        assert rec["head_dim"] in hopper.RENDERABLE_HEAD_DIMS
        assert rec["seq_bucket"] == ht.seq_bucket(rec["seq_bucket"])
        cfg = HopperConfig(**rec["config"])  # ints and bools in range, or FieldError
        assert cfg in ht.candidates(rec["head_dim"]), cfg
        assert ht.fit_reason(cfg, rec["head_dim"], H200) is None, cfg
    # Both head dims, both masks, the grid's three lengths: nothing in the grid falls through.
    assert {(d, c) for d, c, _ in keys} == {(64, False), (64, True), (128, False), (128, True)}
    assert {b for _, _, b in keys} == {1024, 4096, 16384}


@pytest.mark.parametrize("rec", _records(), ids=lambda r: "d{}-{}-{}".format(
    r["head_dim"], "causal" if r["causal"] else "full", r["seq_bucket"]))  # fmt: skip
def test_lookup_picks_the_record_of_the_bucket(rec, on_h200):
    want = HopperConfig(**rec["config"])
    d, causal, bucket = rec["head_dim"], rec["causal"], rec["seq_bucket"]
    # An odd length inside the bucket maps to the same record.
    for seq_q in (bucket, bucket * 3 // 4 + 1):
        assert ht.tuned_config(d, causal, seq_q, H200) == want
        assert hopper.config_for(KernelSpec(d, causal, "bfloat16", "fwd"), seq_q) == want


def test_forward_launches_the_shipped_record(on_h200, monkeypatch):
    """flashgen.kernels.fwd.forward (what flashgen.attention runs) builds its plan with the
    file's config: the family choice is forced (CPU tensors never take it), the launch
    captured instead of run."""
    from flashgen.kernels import fwd

    seen = []
    monkeypatch.setattr(hopper, "choose", lambda spec, q, k, v, sq, per_key=False: True)
    # the plan records its config and launches nothing (no CUDA here)
    monkeypatch.setattr(
        hopper, "plan", lambda spec, cfg, *a, **kw: seen.append(cfg) or (lambda *a: None)
    )
    monkeypatch.setattr(hopper, "sched_counter", lambda device: None)
    fwd._plans.clear()
    try:
        q = torch.zeros(1, 2, 1000, 128, dtype=torch.bfloat16)
        fwd.forward(q, q, q, causal=True, scale=None)
    finally:
        fwd._plans.clear()
    rec = next(r for r in _records()
               if (r["head_dim"], r["causal"], r["seq_bucket"]) == (128, True, 1024))  # fmt: skip
    assert seen == [HopperConfig(**rec["config"])]


@pytest.mark.parametrize(
    ("window", "narrow"),
    [
        (255, True),
        (512, True),
        (513, False),
        (1024, False),
        ((256, 255), True),
        ((256, 256), False),
    ],
)
def test_narrow_windows_launch_the_narrow_tiles(window, narrow, on_h200, monkeypatch):
    """A band of at most hopper.NARROW_WINDOW keys takes NARROW_CONFIGS' 64-key tiles (session
    17 B3: 1.25x at a 256-key window), a wider one the shipped record; the two get separate
    plans, so a model mixing window sizes keeps each one's tiles."""
    from flashgen.kernels import fwd
    from flashgen.kernels.validate import normalize_window

    seen = []
    monkeypatch.setattr(hopper, "choose", lambda spec, q, k, v, sq, per_key=False: True)
    monkeypatch.setattr(
        hopper, "plan", lambda spec, cfg, *a, **kw: seen.append(cfg) or (lambda *a: None)
    )
    monkeypatch.setattr(hopper, "sched_counter", lambda device: None)
    causal = not isinstance(window, tuple)
    pair = normalize_window(window, causal)
    assert hopper.narrow_window(pair, 4096) == narrow
    fwd._plans.clear()
    try:
        q = torch.zeros(1, 2, 4096, 128, dtype=torch.bfloat16)
        fwd.forward(q, q, q, causal=causal, scale=None, window=pair)
        fwd.forward(q, q, q, causal=causal, scale=None)  # no window: the record, its own plan
    finally:
        fwd._plans.clear()
    spec = KernelSpec(128, causal, "bfloat16", "fwd", window=True)
    rec = hopper.for_spec(ht.tuned_config(128, causal, 4096, H200), spec)
    want = hopper.for_spec(hopper.NARROW_CONFIGS[128], spec) if narrow else rec
    assert seen == [want, ht.tuned_config(128, causal, 4096, H200)]
    assert want.block_n == (64 if narrow else 128)


def test_a_window_as_wide_as_the_keys_is_not_narrow():
    # clamp_window leaves a window no wider than the sequence: then it is plain attention
    assert not hopper.narrow_window((299, 0), 300)
    assert hopper.narrow_window((299, 0), 301)
    assert not hopper.narrow_window(None, 4096)
    # head dim 64 has no narrow config: its records stay
    assert 64 not in hopper.NARROW_CONFIGS
