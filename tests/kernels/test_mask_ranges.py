"""The key ranges of a boolean mask per block of query rows (flashgen.kernels.mask_ranges), what
the Hopper forward walks with MASK_RANGES: checked against the mask itself, key by key, for the
masks models build and random ones, broadcast dims and lengths that do not fill a block; and
the forward's launch plan takes them only where they apply (CPU; the kernel is checked on the
GPU in tests/kernels/test_hopper.py)."""

from __future__ import annotations

import pytest
import torch

from flashgen.kernels import mask_ranges as mr


def _assert_bounds(mask: torch.Tensor, exact: bool = True) -> torch.Tensor:
    """Every key any row of a block sees lies in [kv_lo, kv_hi) (exactly its first and last
    one); every row of the block sees every key of [fv_lo, fv_hi); returns the table."""
    table, stride_b, stride_h = mr.key_ranges(mask)
    b, h, sq, sk = mask.shape
    rows = mr.RANGE_ROWS
    assert table.dtype == torch.int32 and table.shape[-2:] == (-(-sq // rows), 4)
    flat = table.flatten()
    for bi in range(b):
        for hi in range(h):
            for r in range(-(-sq // rows)):
                at = bi * stride_b + hi * stride_h + r * 4
                kv_lo, kv_hi, fv_lo, fv_hi = flat[at : at + 4].tolist()
                block = mask[bi, hi, r * rows : (r + 1) * rows]
                seen = block.any(0).nonzero().flatten().tolist()
                if seen:
                    assert (kv_lo, kv_hi) == (seen[0], seen[-1] + 1)
                else:
                    assert (kv_lo, kv_hi, fv_lo, fv_hi) == (0, 0, 0, 0)
                assert 0 <= fv_lo <= fv_hi <= sk
                assert block[:, fv_lo:fv_hi].all()
                if exact and fv_hi > fv_lo:  # the longest run: no longer one exists
                    whole = block.all(0).int().tolist()
                    best = run = 0
                    for x in whole:
                        run = run + 1 if x else 0
                        best = max(best, run)
                    assert fv_hi - fv_lo == best
    return table


def test_hf_causal_padding_mask_blocks():
    n = 300  # not a multiple of the block: the last block has 44 rows
    i = torch.arange(n)
    keep = i[None, :] < torch.tensor([[n], [130], [0]])
    mask = ((i[:, None] >= i[None, :])[None, None] & keep[:, None, None, :]).expand(3, 4, n, n)
    table = _assert_bounds(mask)
    assert table.shape == (3, 1, 5, 4)  # heads broadcast: one table for all of them
    # a causal block sees keys up to its last row, all of them before its first row
    assert table[0, 0, 1].tolist() == [0, 128, 0, 65]
    assert table[2].abs().sum() == 0  # the entry whose keys are all padding


@pytest.mark.parametrize("shape", [(2, 3, 129, 77), (1, 1, 64, 1), (2, 1, 1, 500)])
def test_random_masks(shape):
    gen = torch.Generator().manual_seed(0)
    _assert_bounds(torch.rand(*shape, generator=gen) > 0.3)


def test_documents_and_prefix_masks():
    n = 257
    i = torch.arange(n)
    doc = (i >= 100).int() + (i >= 180).int()
    _assert_bounds((doc[:, None] == doc[None, :])[None, None])
    _assert_bounds(((i[:, None] >= i[None, :]) | (i[None, :] < 70))[None, None])
    _assert_bounds(torch.zeros(1, 2, 65, 10, dtype=torch.bool).expand(3, 2, 65, 10))
    _assert_bounds(torch.ones(1, 1, 200, 33, dtype=torch.bool))


def test_broadcast_strides_follow_the_mask():
    m = torch.rand(1, 1, 70, 90) > 0.5
    _, sb, sh = mr.key_ranges(m.expand(4, 8, 70, 90))
    assert (sb, sh) == (0, 0)
    _, sb, sh = mr.key_ranges((torch.rand(4, 1, 70, 90) > 0.5).expand(4, 8, 70, 90))
    assert (sb, sh) == (2 * 4, 0)
    _, sb, sh = mr.key_ranges(torch.rand(4, 8, 70, 90) > 0.5)
    assert (sb, sh) == (8 * 2 * 4, 2 * 4)


def test_refuses_other_masks():
    with pytest.raises(ValueError, match="boolean"):
        mr.key_ranges(torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="boolean"):
        mr.key_ranges(torch.zeros(4, 4, dtype=torch.bool))


def test_forward_plan_takes_ranges_only_where_they_apply(monkeypatch):
    """The Hopper plan gets MASK_RANGES for a boolean mask varying along query rows without
    lengths, with FLASHGEN_MASK_RANGES=1 only; its launch then ends with the mask's table."""
    from flashgen.kernels import fwd, hopper, plans

    monkeypatch.setattr(hopper, "choose", lambda *a: True)
    monkeypatch.setattr(hopper, "sched_counter", lambda device: None)
    asked, launched = [], []

    def plan(*a, per_key=False, ranges=False, split=None, fixed=False, mask_tma=(None, None)):
        assert mask_tma == (None, None)  # (no MASK_TMA rendering here: FLASHGEN_MASK_TMA unset)
        asked.append(ranges)
        return lambda *args: launched.append(args)

    monkeypatch.setattr(hopper, "plan", plan)
    q = torch.randn(1, 2, 100, 64).to(torch.bfloat16)
    k = v = torch.randn(1, 2, 90, 64).to(torch.bfloat16)
    dense = (torch.rand(1, 1, 100, 90) > 0.5).expand(1, 2, 100, 90)
    per_key = (torch.rand(1, 1, 1, 90) > 0.5).expand(1, 2, 100, 90)
    for env, mask, want in (("1", dense, True), ("0", dense, False), ("1", per_key, False)):
        monkeypatch.setenv(mr.ENV, env)
        plans.clear_all()
        fwd.forward(q, k, v, causal=False, scale=None, mask=mask)
        assert asked[-1] is want
        tail = launched[-1][-3:]
        if want:
            table, sb, sh = mr.key_ranges(mask)
            assert torch.equal(tail[0], table) and tail[1:] == (sb, sh)
        else:  # the mask stands in, never read
            assert tail[0] is mask and tail[1:] == (0, 0)
    plans.clear_all()
