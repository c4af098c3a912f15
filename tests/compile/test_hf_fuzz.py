"""benchmarks/hf_fuzz.py, the random HF-model sweep of the backend, on the CPU: every family's
config builds a model, and one drawn case (Mistral's eager attention, a 5-key sliding window, a
left-padded batch of two, `dynamic=True`, then a KV cache's prefill and two decoding steps)
compiles, replaces every attention site and matches eager. The sweep itself is the script's."""

from __future__ import annotations

import random

import pytest
import repo_scripts

pytest.importorskip("transformers")
fuzz = repo_scripts.load("benchmarks/hf_fuzz.py", "hf_fuzz_under_test")


@pytest.mark.parametrize("family", fuzz.FAMILIES)
def test_every_family_builds(family):
    cfg, auto = fuzz.config_for(family, random.Random(0))
    attn = "eager" if family in fuzz.EAGER_ONLY else "sdpa"
    model = auto.from_config(cfg, attn_implementation=attn)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_a_windowed_left_padded_decoder_matches_eager():
    rec = fuzz.run_case(54)
    assert (rec["family"], rec["padding"], rec["dynamic"]) == ("mistral", "left", True), rec
    assert rec["diff"] <= 1e-3, rec
    assert rec["found"] > 0 and rec["replaced"] == rec["found"], rec
