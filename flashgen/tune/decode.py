"""Tune the split-KV decode kernels: time every `DecodeConfig` candidate per decode bucket.

    python -m flashgen.tune.decode --batch 1,8,64 --kv 2048,8192,65536 --heads 32/8 \\
        --head-dim 128 --dtype bfloat16 --out decode-configs.json

Why its own tuner: a decode config is a tile plus a split count, and a decode bucket is
(batch, key length) with one query row (flashgen.hardware.decode), which the forward tuner's
records (TileConfig per (query, key) bucket) cannot hold. Each candidate is checked against
SDPA's math in float32 before it is timed (median, L2 flushed: `triton.testing.do_bench`); a
candidate that fails or is wrong costs inf, never the run. The output is the decode configs file
that `flashgen.hardware.decode` reads (FLASHGEN_DECODE_CONFIGS, or the shipped
tuning_db/decode-<gpu>.json): plain integers, validated again (DecodeConfig) when read.

Needs a CUDA GPU. Not yet stored in the tuning database (its records hold TileConfigs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

FORMAT = "flashgen-decode-configs"


def _time(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=5, rep=20, return_mode="median")


def tune_bucket(batch, hq, hkv, seq_k, head_dim, dtype, budget_s=30.0) -> dict | None:
    """The fastest correct candidate for one bucket (inputs at the bucket's upper corner), as a
    record dict, or None when no candidate ran."""
    import torch

    from ..hardware import decode as hw
    from ..kernels.decode import decode_forward

    tdtype = getattr(torch, dtype)
    q = torch.randn(batch, hq, 1, head_dim, device="cuda", dtype=tdtype)
    k = torch.randn(batch, hkv, seq_k, head_dim, device="cuda", dtype=tdtype)
    v = torch.randn_like(k)
    gqa = hq != hkv
    want = torch.nn.functional.scaled_dot_product_attention(
        q[:1].float(), k[:1].float(), v[:1].float(), enable_gqa=gqa
    )
    tol = 1e-4 if dtype == "float32" else 2e-2
    best: tuple[float, hw.DecodeConfig] | None = None
    end = time.monotonic() + budget_s
    for cfg in hw.candidates(head_dim, dtype, hw.row_block(hq // hkv, 1), seq_k):
        if time.monotonic() > end:
            break
        try:
            out, _ = decode_forward(q, k, v, causal_offset=None, scale=None, config=cfg)
            if not (out[:1].float() - want).abs().max().item() <= tol:
                continue
            ms = _time(
                lambda c=cfg: decode_forward(q, k, v, causal_offset=None, scale=None, config=c)
            )
        except Exception:  # a failing candidate costs inf, never the run
            continue
        if best is None or ms < best[0]:
            best = (ms, cfg)
    if best is None:
        return None
    ms, cfg = best
    nbytes = 2 * k.numel() * k.element_size()
    return {
        "head_dim": head_dim, "dtype": dtype, "hkv": hkv, "group": hq // hkv,
        "bucket": list(hw.decode_bucket(batch, seq_k)),
        "config": {"block_n": cfg.block_n, "num_warps": cfg.num_warps,
                   "num_stages": cfg.num_stages, "num_splits": cfg.num_splits},
        "time_ms": ms, "tbs": nbytes / ms / 1e9,
    }  # fmt: skip


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{what} must be integers >= 1, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m flashgen.tune.decode",
        description="Time every split-KV decode config per (batch, key length) bucket on this "
        "GPU and write the fastest as a decode configs file (see flashgen.hardware.decode).",
    )
    p.add_argument("--batch", default="1,8,64", help="batch sizes (comma-separated)")
    p.add_argument("--kv", default="2048,8192,32768,65536", help="key lengths (comma-separated)")
    p.add_argument("--heads", default="32/8", help="query heads / kv heads, e.g. 32/8 or 32/32")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], default="bfloat16")
    p.add_argument("--budget", type=float, default=30.0, help="seconds per bucket at most")
    p.add_argument("--out", required=True, help="JSON file to write (merged if it exists)")
    args = p.parse_args(argv)
    try:
        hq, hkv = (int(x) for x in args.heads.split("/"))
    except ValueError:
        raise SystemExit(f"--heads must look like 32/8, got {args.heads!r}") from None
    if hkv < 1 or hq % hkv:
        raise SystemExit(f"--heads: query heads must be a multiple of kv heads, got {args.heads}")
    batches, kvs = _ints(args.batch, "--batch"), _ints(args.kv, "--kv")
    import torch

    if not torch.cuda.is_available():
        print("flashgen.tune.decode needs a CUDA GPU", file=sys.stderr)
        return 2
    try:
        with open(args.out) as f:
            doc = json.load(f)
    except FileNotFoundError:
        doc = {"format": FORMAT, "version": 1, "gpu": torch.cuda.get_device_name(), "records": []}
    for batch in batches:
        for kv in kvs:
            rec = tune_bucket(batch, hq, hkv, kv, args.head_dim, args.dtype, args.budget)
            if rec is None:
                print(f"b{batch} kv{kv}: no candidate ran", flush=True)
                continue
            key = {k: rec[k] for k in ("head_dim", "dtype", "hkv", "group", "bucket")}
            doc["records"] = [r for r in doc["records"] if {k: r.get(k) for k in key} != key] + [
                rec
            ]
            cfg = rec["config"]
            print(
                f"b{batch} kv{kv} {hq}/{hkv} d{args.head_dim}: n{cfg['block_n']} "
                f"w{cfg['num_warps']} s{cfg['num_stages']} x{cfg['num_splits']} "
                f"{rec['time_ms'] * 1e3:.1f} us {rec['tbs']:.2f} TB/s",
                flush=True,
            )
            with open(args.out, "w") as f:
                json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
