"""The Hopper forward's stream-K split (flashgen.kernels.stream_merge): the runs each program
walks, and the merge kernel (in the interpreter on the CPU) against float64 attention, with
the kernel's parts emulated from the runs."""

from __future__ import annotations

import math

import pytest
import torch

from flashgen.kernels import stream_merge


@pytest.mark.parametrize("items, n_kt, grid", [(9, 7, 4), (2048, 128, 132), (4096, 8, 132),
                                               (5, 3, 5), (10, 10, 3)])  # fmt: skip
def test_runs_cover_every_tile_once_and_pair_at_each_cut(items, n_kt, grid):
    total = items * n_kt
    runs = stream_merge.runs(total, grid, n_kt)
    seen = [0] * total
    slots = {}
    for p, mine in enumerate(runs):
        assert sum(n for _, _, n, _ in mine) == (p + 1) * total // grid - p * total // grid
        for item, k_lo, n_k, slot in mine:
            assert n_k > 0 and k_lo + n_k <= n_kt
            for t in range(item * n_kt + k_lo, item * n_kt + k_lo + n_k):
                seen[t] += 1
            if slot >= 0:
                assert slot not in slots
                slots[slot] = (item, k_lo, n_k)
    assert seen == [1] * total
    # every cut item: its start in slot 2b (program b), its end in slot 2b + 1 (program b + 1)
    for b in range(grid - 1):
        cut = (b + 1) * total // grid
        if cut % n_kt:
            start, end = slots.pop(2 * b), slots.pop(2 * b + 1)
            assert start[0] == end[0] == cut // n_kt
            assert start[1] == 0 and start[2] == end[1] == cut % n_kt
            assert end[1] + end[2] == n_kt
    assert not slots  # no other part is stored


def _attention(q, k, v, scale):
    """float64 (out, natural lse) of rows q against keys k."""
    s = (q @ k.T) * scale
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ v, lse


def test_merge_matches_float64():
    """A stream-K launch emulated: B1 H3, 70 queries in 32-row items (the last one ragged),
    100 keys in 16-key tiles (7, the last ragged), four programs: whole items written to out,
    cut ones' runs to the parts as the kernel stores them (O / l, base-2 lse), then the merge
    kernel; out and lse equal float64 attention over all keys."""
    b, h, sq, sk, d, block_m, block_n, grid = 1, 3, 70, 100, 16, 32, 16, 4
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b * h, n, d, generator=gen, dtype=torch.float64)
               for n in (sq, sk, sk))  # fmt: skip
    scale = d**-0.5
    num_m, n_kt = math.ceil(sq / block_m), math.ceil(sk / block_n)
    items = b * h * num_m
    total = items * n_kt
    out = torch.full((b * h * sq, d), float("nan"))
    lse = torch.full((b * h * sq,), float("nan"))
    part = torch.full((2 * (grid - 1) * block_m, d), float("nan"))
    part_lse = torch.full((2 * (grid - 1) * block_m,), float("nan"))
    cuts = 0
    for mine in stream_merge.runs(total, grid, n_kt):
        for item, k_lo, n_k, slot in mine:
            bh, m0 = divmod(item, num_m)
            m0 *= block_m
            rows = slice(m0, min(m0 + block_m, sq))
            keys = slice(k_lo * block_n, min((k_lo + n_k) * block_n, sk))
            o, l_nat = _attention(q[bh, rows], k[bh, keys], v[bh, keys], scale)
            n = o.shape[0]
            if slot < 0:
                out[bh * sq + m0 : bh * sq + m0 + n] = o
                lse[bh * sq + m0 : bh * sq + m0 + n] = l_nat
            else:
                cuts += 1
                part[slot * block_m : slot * block_m + n] = o
                part_lse[slot * block_m : slot * block_m + n] = l_nat / math.log(2)
    assert cuts >= 4  # the case cuts items (two parts each)
    grid_merge = (grid - 1, math.ceil(block_m / 8))
    stream_merge.stream_merge_kernel[grid_merge](
        part.float(), part_lse.float(), out_f := out.float(), lse_f := lse.float(), total, grid,
        n_kt, num_m, sq, BLOCK_M=block_m, HEAD_DIM=d, ROWS=8,
    )  # fmt: skip
    for bh in range(b * h):
        ref_out, ref_lse = _attention(q[bh], k[bh], v[bh], scale)
        got = out_f[bh * sq : (bh + 1) * sq].double()
        assert torch.isfinite(got).all()
        assert (got - ref_out).abs().max().item() < 1e-5
        assert (lse_f[bh * sq : (bh + 1) * sq].double() - ref_lse).abs().max().item() < 1e-5
