"""benchmarks/block_sparse_fuzz.py, the random-mask sweep of the block-sparse walk, on a few seeds:
its masks give the walk whole, partial and hidden tiles, and every case matches float64 (the
script raises on a mismatch). The full sweep (hundreds of seeds) is the script's."""

from __future__ import annotations

import random

import pytest
import repo_scripts
import torch

fuzz = repo_scripts.load("benchmarks/block_sparse_fuzz.py", "block_sparse_fuzz_under_test")


@pytest.fixture
def walk_everywhere(monkeypatch):
    from flashgen.kernels import block_mask

    monkeypatch.setattr(block_mask, "MIN_SCORES", 0)
    monkeypatch.setenv(block_mask.ENV, "1")


@pytest.mark.parametrize("seed", [5, 9, 111])
def test_cases_match_float64_through_the_lists(seed, walk_everywhere, device):
    """5 (a band, one mask for every head and entry) and 9 (bands, cells and documents, a mask
    per head and entry, GQA), whose lists hold whole and partial tiles, and 111 (cells, a mask
    per entry, 64-row tiles), whose hold partial ones only: the forward and both backward
    kernels walk the lists and match float64."""
    line = fuzz.run_case(seed, device)
    assert "forward lists" in line


def test_a_case_through_the_public_function(walk_everywhere, device):
    """`--via attention`: flashgen.attention and autograd with the run-time choice's tiles
    (on the CPU the forward's 128 rows against the backward kernels' 64) walk the lists too
    and match float64."""
    line = fuzz.run_case(0, device, via="attention")
    if device == "cpu":
        assert "tiles fwd 128x64 dK/dV 64x64" in line


def test_masks_have_whole_partial_and_hidden_tiles(walk_everywhere):
    """What the sweep is for: over a few draws, the masks' 16 x 16 tiles are whole, partial
    and hidden, not only partial (as a random element-wise mask's are)."""
    from flashgen.kernels.block_mask import tile_lists

    rng = random.Random(0)
    whole = part = hidden = 0
    for _ in range(12):
        mask = fuzz.draw_mask(rng, 70, 90, torch)
        idx, cnt, _, _ = tile_lists(mask.expand(1, 1, 70, 90), 16, 16)
        whole += int(cnt[..., 0].sum())
        part += int(cnt[..., 1].sum())
        hidden += 5 * 6 - int(cnt.sum())  # 5 query blocks x 6 key tiles
    assert whole > 0 and part > 0 and hidden > 0


def test_arguments():
    assert fuzz.parse_args(["--cases", "3", "--device", "cuda"]).device == "cuda"
    assert fuzz.parse_args(["--via", "attention"]).via == "attention"
    with pytest.raises(SystemExit):
        fuzz.parse_args(["--cases", "0"])
    with pytest.raises(SystemExit):
        fuzz.parse_args(["--device", "tpu"])
