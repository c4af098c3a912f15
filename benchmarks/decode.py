"""Decode attention on the GPU: flashgen's split-KV kernels against PyTorch's SDPA backends.

One query row per sequence (a generation step), bf16, K/V of `kv` keys per sequence; the
achieved bandwidth is (K + V + Q + O bytes) / median time (triton.testing.do_bench, L2
flushed). Each case is checked against SDPA's math in float32 first (max abs error printed).
SDPA is timed on every backend that accepts the case; "sdpa" is the fastest of them. flashgen is
timed through `flashgen.kernels.decode.decode_forward` (kernel + allocations) and through
`flashgen.attention` (the public path, with its input checks).

    python benchmarks/decode.py [--out FILE.csv] [--budget SECONDS] [--sweep BxHQxHKVxKVxD,...]

`--sweep` first times the DecodeConfig candidates near the default for each given shape and
prints the best ones (what the defaults should say); `--no-grid` stops after that. Rows are printed and appended to the CSV as
they are measured, so a run stopped by its time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402
from flashgen.hardware import decode as hw  # noqa: E402
from flashgen.kernels.decode import decode_forward  # noqa: E402

BACKENDS = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")  # "sdpa_best" names them without "sdpa_"
FIELDS = [
    "batch", "hq", "hkv", "kv", "d", "err", "flashgen_us", "flashgen_api_us", "sdpa_us",
    "sdpa_best", "flashgen_tbs", "sdpa_tbs", "ratio", "config", "gpu", "torch", "triton",
    "commit",
]  # fmt: skip


def ms(fn) -> float:
    return scripts.timer("cuda", 15, warmup_ms=3)(fn)


def case(batch, hq, hkv, kv, d, version):
    dev = "cuda"
    q = torch.randn(batch, hq, 1, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(batch, hkv, kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(batch, hkv, kv, d, device=dev, dtype=torch.bfloat16)
    gqa = hq != hkv
    # Checked on the first sequence only (a float32 copy of a 64 x 64k cache does not fit).
    want = sdpa(q[:1].float(), k[:1].float(), v[:1].float(), enable_gqa=gqa)
    out, _ = decode_forward(q, k, v, causal_offset=None, scale=None)
    err = (out[:1].float() - want).abs().max().item()
    del want
    nbytes = 2 * k.numel() * 2 + 2 * q.numel() * 2
    ours = ms(lambda: decode_forward(q, k, v, causal_offset=None, scale=None))
    api = ms(lambda: flashgen.attention(q, k, v))
    sdpa_times = scripts.sdpa_baselines(q, k, v, causal=False, time_fn=ms, impls=BACKENDS)
    times = {  # the backends that accept the case
        impl.removeprefix("sdpa_"): t for impl, t in sdpa_times.items() if not isinstance(t, str)
    }
    best = min(times, key=times.get) if times else "none"
    theirs = times.get(best, float("nan"))
    cfg = hw.default_config(d, "bfloat16", batch, hkv, hq // hkv, 1, kv)
    return {
        "batch": batch, "hq": hq, "hkv": hkv, "kv": kv, "d": d, "err": f"{err:.2e}",
        "flashgen_us": round(ours * 1e3, 2), "flashgen_api_us": round(api * 1e3, 2),
        "sdpa_us": round(theirs * 1e3, 2), "sdpa_best": best,
        "flashgen_tbs": round(nbytes / ours / 1e9, 3),
        "sdpa_tbs": round(nbytes / theirs / 1e9, 3), "ratio": round(theirs / ours, 3),
        "config": cfg.short(), **version,
    }  # fmt: skip


def check() -> None:
    """bf16 on the GPU against float64: causal offsets (top-left, bottom-right), query lengths
    1 and 16, GQA and MHA, an odd head dim, more splits than needed (empty splits), and HF
    generate()'s mask read as a tensor (a static cache's empty slots and a left-padded entry)."""
    for batch, hq, hkv, sq, kv, d, off, cfg in (
        (2, 16, 4, 1, 4096, 128, "hf", None),
        (2, 32, 8, 1, 4099, 128, "br", None),
        (1, 16, 16, 16, 3001, 64, "br", None),
        (1, 8, 2, 5, 777, 80, "top", hw.DecodeConfig(64, 4, 3, 64)),
        (3, 8, 1, 1, 20000, 128, None, None),
    ):
        gen = torch.Generator(device="cuda").manual_seed(kv)
        q, k, v = (
            torch.randn(batch, h, s, d, device="cuda", generator=gen).to(torch.bfloat16)
            for h, s in ((hq, sq), (hkv, kv), (hkv, kv))
        )
        c = {None: None, "top": 0, "br": kv - sq, "hf": None}[off]
        mask = None
        if off == "hf":  # position 3000 of a 4096-slot static cache; entry 1 left-padded by 17
            j = torch.arange(kv, device="cuda")
            mask = (j <= 3000)[None, :] & (j[None, :] >= torch.tensor([[0], [17]], device="cuda"))
            mask = mask[:, None, None, :]
        full = None if mask is None else mask.expand(batch, hq, sq, kv)
        out, lse = decode_forward(q, k, v, causal_offset=c, scale=None, config=cfg, mask=full)
        qd, kd, vd = (t.double().repeat_interleave(hq // t.shape[1], 1) for t in (q, k, v))
        s = qd @ kd.transpose(-1, -2) / d**0.5
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        if c is not None:
            i = torch.arange(sq, device="cuda")[:, None]
            j = torch.arange(kv, device="cuda")[None, :]
            s = s.masked_fill(j > i + c, float("-inf"))
        want = torch.softmax(s, -1) @ vd
        err = (out.double() - want).abs().max().item()
        lerr = (lse.double() - torch.logsumexp(s, -1)).abs().max().item()
        ok = err < 2e-2 and lerr < 1e-2 and not out.isnan().any()
        print(f"check b{batch} {hq}/{hkv} sq{sq} kv{kv} d{d} {off}: out err {err:.2e} "
              f"lse err {lerr:.2e} {'OK' if ok else 'FAIL'}", flush=True)  # fmt: skip


def sweep(shape: str, budget_end: float) -> None:
    """Time DecodeConfig candidates near the default for one BxHQxHKVxKVxD shape (bf16): block_n
    32/64/128, 4 or 8 warps, 2-4 stages, the default split count, half and double it."""
    batch, hq, hkv, kv, d = map(int, shape.split("x"))
    q = torch.randn(batch, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, hkv, kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    nbytes = 2 * k.numel() * 2
    default = hw.default_config(d, "bfloat16", batch, hkv, hq // hkv, 1, kv)
    splits = {max(1, default.num_splits // 2), default.num_splits, default.num_splits * 2}
    grid = [
        c
        for c in hw.candidates(d, "bfloat16", hw.row_block(hq // hkv, 1), kv)
        if c.num_splits in splits and c.num_warps in (4, 8)
    ]
    grid.sort(key=lambda c: (c.num_splits != default.num_splits, c.num_warps != 4, c.block_n == 32,
                             c.num_stages, c.block_n))  # fmt: skip
    found = []
    for cfg in grid:
        if time.time() > budget_end:
            break
        try:
            t = scripts.timer("cuda", 10, warmup_ms=3)(
                lambda c=cfg: decode_forward(q, k, v, causal_offset=None, scale=None, config=c)
            )
        except Exception as exc:  # a config that fails costs inf, never the run
            print("sweep", cfg.short(), "failed", type(exc).__name__, flush=True)
            continue
        found.append((t, cfg))
    how = "tma" if os.environ.get("FLASHGEN_DECODE_TMA") == "1" else "ptr"
    print(f"sweep {shape} {how}: {len(found)} of {len(grid)} timed, default {default.short()}")
    for t, cfg in sorted(found, key=lambda x: x[0])[:5]:
        tbs = nbytes / t / 1e9
        print(f"sweep {shape} {how} {cfg.short()} {t * 1e3:.1f} us {tbs:.2f} TB/s", flush=True)


def main(argv=None) -> None:
    parser = scripts.parser(__doc__, out="decode.csv", budget=600, checks=True)
    parser.add_argument(
        "--sweep",
        default="",
        help="BxHQxHKVxKVxD shapes (comma-separated) "
        "whose configs near the default are timed first",
    )
    parser.add_argument("--sweep-s", type=float, default=12, help="seconds per sweep shape")
    parser.add_argument(
        "--sweep-tma",
        action="store_true",
        help="sweep each shape again with K/V through TMA (FLASHGEN_DECODE_TMA=1)",
    )
    parser.add_argument("--grid", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--kvs", default="2048,8192,32768,65536")
    parser.add_argument("--dims", default="128,64")
    parser.add_argument(
        "--workers", type=int, default=0,
        help="compile each grid case's kernels first in this many processes",
    )  # fmt: skip
    args = parser.parse_args(argv)
    end = time.time() + args.budget
    meta = scripts.run_meta("cuda")
    version = {key: meta[key] for key in ("gpu", "torch", "triton", "commit")}
    if not args.no_check:
        check()
    for shape in filter(None, args.sweep.split(",")):
        for use_tma in (False, True) if args.sweep_tma else (False,):
            os.environ["FLASHGEN_DECODE_TMA"] = "1" if use_tma else "0"
            sweep(shape, time.time() + args.sweep_s)
        os.environ.pop("FLASHGEN_DECODE_TMA", None)
    if not args.grid:
        return
    dims, batches, kvs = (list(map(int, x.split(","))) for x in (args.dims, args.batches, args.kvs))
    if args.workers > 1:
        from flashgen.tune.decode import precompile

        t0 = time.time()
        tasks = [
            (b, hq, hkv, kv, d, "bfloat16", hw.default_config(d, "bfloat16", b, hkv, hq // hkv, 1, kv))
            for d in dims for hq, hkv in ((32, 8), (32, 32)) for b in batches for kv in kvs
        ]  # fmt: skip
        precompile(tasks, args.workers)
        print(f"precompiled {len(tasks)} grid cases in {time.time() - t0:.1f} s", flush=True)
    with scripts.RowWriter(args.out, FIELDS, meta=meta, append=True) as writer:
        for d in dims:
            for hq, hkv in ((32, 8), (32, 32)):
                for batch in batches:
                    for kv in kvs:
                        if time.time() > end:
                            print("budget spent: stopping", flush=True)
                            return
                        row = case(batch, hq, hkv, kv, d, version)
                        writer.write(row)
                        print(
                            f"b{batch} {hq}/{hkv} kv{kv} d{d}: flashgen {row['flashgen_us']} us "
                            f"({row['flashgen_tbs']} TB/s, api {row['flashgen_api_us']} us) "
                            f"sdpa[{row['sdpa_best']}] {row['sdpa_us']} us ({row['sdpa_tbs']} "
                            f"TB/s) ratio {row['ratio']} err {row['err']} {row['config']}",
                            flush=True,
                        )
                        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
