"""Random boolean masks through the block-sparse walk, forward and backward, against float64 (a
correctness sweep, not a timing).

Why: a boolean mask that varies along query rows is walked by lists of the key tiles each
query block sees whole or in part (`flashgen.kernels.block_mask`; per key block for the dK/dV
kernel), which two kernels build on the device (`tile_kinds`: each tile's kind; `tile_lists`:
each block's lists, a prefix sum a chunk). A wrong list skips visible keys or reads hidden ones
unmasked, and only masks with whole, partial and hidden tiles in odd places show it; the unit
tests pin a few, random masks (every tile partial) never reach the whole-tile path. Here each
case draws a mask built from tiles (document masks, tile-level patterns at several grains,
fully hidden rows and blocks, ragged edges), its broadcast shape ([Sq, Sk] to [B, H, Sq, Sk]),
GQA, odd lengths, a head dim and the launchers' tiles (16-64 rows and keys: lists of 1 to 10
tiles), with the walk forced on at every size (`block_mask.MIN_SCORES` = 0). It checks that the plans walk the
lists, then the output and the gradients of q, k and v against float64 (rows that see no key:
zeros). A case that fails prints its seed; `--seed S --cases 1` runs it alone.

Usage: python benchmarks/block_sparse_fuzz.py [--cases N] [--seed S] [--device cuda]
       [--via attention]
(default: the CPU, in Triton's interpreter, set up here, a few seconds a case; `cuda`: the
compiled kernels on the GPU, float32 inputs as on the CPU, so the same tolerance holds.)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=50, help="how many seeds (default 50)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu",
        help="cpu: Triton's interpreter (default); cuda: the compiled kernels on the GPU",
    )  # fmt: skip
    parser.add_argument(
        "--via", choices=("launchers", "attention"), default="launchers",
        help="launchers: the forward and backward launchers with the drawn tiles (default); "
        "attention: flashgen.attention and autograd, with the tiles the run-time choice picks "
        "for each kernel (on an sm_90 GPU the dQ kernel's own measured ones, so its lists "
        "differ from the dK/dV kernel's)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases must be at least 1, got {args.cases}")
    return args


def draw_mask(rng: random.Random, sq: int, sk: int, torch):
    """A boolean [sq, sk] mask of tiles of a random grain: a document mask (queries see the
    keys of their own document, with or without causality inside it), or a grid of cells each
    hidden, visible or random; then some rows and a block of rows hidden, and keys past a
    random length hidden (ragged padding)."""
    gen = torch.Generator().manual_seed(rng.randrange(1 << 30))
    style = rng.choice(["documents", "cells", "cells", "band"])
    if style == "documents":
        cuts = sorted(rng.sample(range(1, max(sq, sk)), k=min(rng.randint(1, 4), max(sq, sk) - 1)))
        qdoc = torch.bucketize(torch.arange(sq) * max(sq, sk) // sq, torch.tensor(cuts), right=True)
        kdoc = torch.bucketize(torch.arange(sk) * max(sq, sk) // sk, torch.tensor(cuts), right=True)
        mask = qdoc[:, None] == kdoc[None, :]
        if rng.random() < 0.5:
            mask &= torch.arange(sk)[None, :] * sq <= torch.arange(sq)[:, None] * sk + sk
    elif style == "cells":
        grain = rng.choice([8, 16, 24, 32, 48, 64])
        rows, cols = -(-sq // grain), -(-sk // grain)
        # 0 hidden, 1 visible, 2 random (visible the most: whole tiles need whole cells)
        kinds = torch.multinomial(torch.tensor([0.3, 0.5, 0.2]), rows * cols, True, generator=gen)
        kinds = kinds.view(rows, cols)
        kinds = kinds.repeat_interleave(grain, 0)[:sq].repeat_interleave(grain, 1)[:, :sk]
        noise = torch.rand(sq, sk, generator=gen) > rng.choice([0.1, 0.5, 0.9])
        mask = (kinds == 1) | ((kinds == 2) & noise)
    else:  # a band wider than a tile, which leaves whole tiles inside and partial ones on edges
        width = rng.randint(1, max(sk, 2))
        offset = rng.randint(-sk // 2, sk // 2)
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        mask = (j >= i + offset - width) & (j <= i + offset + width)
    if rng.random() < 0.3:
        mask[rng.randrange(sq)] = False  # a row that sees no key
    if rng.random() < 0.3:
        start = rng.randrange(sq)
        mask[start : start + rng.randint(1, 40)] = False
    if rng.random() < 0.3:
        mask[:, rng.randint(1, sk) :] = False  # keys past a length
    return mask


def run_case(seed: int, device: str = "cpu", via: str = "launchers") -> str:
    """One random case; returns a one-line description (raises on a mismatch)."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.kernels import block_mask, bwd, fwd
    from flashgen.kernels.bwd import backward
    from flashgen.kernels.fwd import forward
    from flashgen.kernels.reference import rows_ref, scores_ref
    from flashgen.kernels.validate import expand_mask
    from flashgen.ops import attention

    rng = random.Random(seed)
    b, hkv = rng.randint(1, 2), rng.randint(1, 2)
    hq = hkv * rng.choice([1, 2])
    sq, sk = rng.randint(1, 150), rng.randint(1, 150)
    d = rng.choice([16, 32, 64])
    tiles = TileConfig(rng.choice([16, 32, 64]), rng.choice([16, 32, 64]), 4, 1)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=gen)
    k, v = (torch.randn(b, hkv, sk, d, generator=gen) for _ in range(2))
    do = torch.randn(b, hq, sq, d, generator=gen)
    q, k, v, do = (t.to(device) for t in (q, k, v, do))
    shape = rng.choice(["[Sq,Sk]", "[B,1,Sq,Sk]", "[1,H,Sq,Sk]", "[B,H,Sq,Sk]"])
    if shape == "[Sq,Sk]":
        mask = draw_mask(rng, sq, sk, torch)
    else:
        nb = b if "B" in shape[:2] else 1
        nh = hq if ",H," in shape else 1
        mask = torch.stack([draw_mask(rng, sq, sk, torch) for _ in range(nb * nh)])
        mask = mask.view(nb, nh, sq, sk)
    mask = mask.to(device)
    fwd._plans.clear()
    bwd._plans.clear()
    full = expand_mask(mask, q, k)
    scale = d**-0.5
    if via == "attention":  # the run-time choice's tiles, the autograd node, the op
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attention(*leaves, scale=scale, attn_mask=mask, impl="flashgen")
        grads = torch.autograd.grad(out, leaves, do)
    else:
        out, lse = forward(q, k, v, causal=False, scale=scale, config=tiles, mask=full)
        grads = backward(do, q, k, v, out, lse, causal=False, scale=scale, config=tiles,
                         needs=(True, True, True), mask=full)  # fmt: skip
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    scores = scores_ref(*leaves[:2], scale=scale)
    want = rows_ref(scores.masked_fill(~full, float("-inf")), leaves[2])[0]
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
    expected = torch.autograd.grad(want, leaves, do.double())
    for name, g, e in zip("qkv", grads, expected, strict=True):
        torch.testing.assert_close(
            g.double(), e, atol=5e-5, rtol=1e-4, msg=lambda m, n=name: f"d{n}: {m}"
        )
    seen = full.any(-1).float().mean().item()
    head = f"B{b} H{hq}/{hkv} {sq}x{sk} d{d} mask {shape} rows seeing a key {seen:.2f}"
    (bplan,) = bwd._plans.values()
    _, kv_tiles, dq_tiles = bplan.tiles  # the backward's lists: per dK/dV and dQ block
    walks = [bplan.dq.constexprs, bplan.dkdv.constexprs]
    if via == "attention" and not fwd._plans:  # a short query: the split-KV decode kernels
        if not all(c.get("BLOCK_SPARSE") is True for c in walks):
            raise AssertionError("a backward plan does not walk the block-sparse lists")
        return f"{head}; forward by the decode kernels, the backward's lists walked"
    (plan,) = fwd._plans.values()
    blocks = plan.run.constexprs
    tiles = TileConfig(blocks["BLOCK_M"], blocks["BLOCK_N"], 4, 1)  # (what the forward ran)
    if not all(c.get("BLOCK_SPARSE") is True for c in [blocks, *walks]):
        raise AssertionError("a plan does not walk the block-sparse lists")
    _, cnt, _, _ = block_mask.tile_lists(full, tiles.block_m, tiles.block_n)
    whole, part = (int(n) for n in cnt.sum(dim=(0, 1, 2)))
    return (f"{head}, tiles fwd {tiles.block_m}x{tiles.block_n} dK/dV {kv_tiles[0]}x"
            f"{kv_tiles[1]} dQ {dq_tiles[0]}x{dq_tiles[1]}, forward lists {whole} whole / "
            f"{part} partial")  # fmt: skip


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["FLASHGEN_BLOCK_SPARSE"] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import torch

    from flashgen.kernels import block_mask

    torch.set_num_threads(1)
    block_mask.MIN_SCORES = 0  # the walk at every size (the sizes an interpreter can run)
    failed = []
    start = time.time()
    for n, seed in enumerate(range(args.seed, args.seed + args.cases), 1):
        try:
            line = f"ok {run_case(seed, args.device, args.via)}"
        except Exception:
            failed.append(seed)
            line = "FAILED\n" + traceback.format_exc()
        print(f"[{n}/{args.cases}] seed {seed} {line} ({time.time() - start:.0f} s)", flush=True)
    print(f"{args.cases - len(failed)} passed, {len(failed)} failed{': ' if failed else ''}"
          f"{' '.join(map(str, failed))}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
