"""Tune the split-KV decode kernels: time every `DecodeConfig` candidate per decode bucket.

    python -m flashgen.tune.decode --batch 1,8,64 --kv 2048,8192,65536 --heads 32/8 \\
        --head-dim 128 --dtype bfloat16 --out decode-configs.json [--space near] [--workers 14]

Why its own tuner: a decode config is a tile plus a split count, and a decode bucket is
(batch, key length) with one query row (flashgen.hardware.decode), which the forward tuner's
records (TileConfig per (query, key) bucket) cannot hold. Each candidate is checked against
SDPA's math in float32 before it is timed (median, L2 flushed: `triton.testing.do_bench`); a
candidate that fails or is wrong costs inf, never the run. The output is the decode configs file
that `flashgen.hardware.decode` reads (FLASHGEN_DECODE_CONFIGS, or the shipped
tuning_db/decode-<gpu>.json): plain integers, validated again (DecodeConfig) when read.

`--space near` times a short list per bucket (`flashgen.hardware.decode.near_default`: the
heuristic's tiles and split counts, their neighbours and the split counts that fill whole waves)
instead of every candidate; `--workers N` first compiles every candidate's kernels in N processes
(each launches it once on a small copy with the same specialisation, filling Triton's cache), so
the timing process spends its budget timing, not compiling: one compile costs about as much as
timing ten candidates.

Needs a CUDA GPU. Not yet stored in the tuning database (its records hold TileConfigs).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..core.flags import add_flags

FORMAT = "flashgen-decode-configs"


def _time(fn) -> float:
    import triton

    return triton.testing.do_bench(fn, warmup=3, rep=12, return_mode="median")


def bucket_candidates(batch, hq, hkv, seq_k, head_dim, dtype, space="all") -> list:
    """The DecodeConfigs to time for one bucket: every candidate, or the short list ("near")."""
    from ..hardware import decode as hw

    if space == "near":
        return hw.near_default(head_dim, dtype, batch, hkv, hq // hkv, 1, seq_k)
    return hw.candidates(head_dim, dtype, hw.row_block(hq // hkv, 1), seq_k)


def _compile_key(task) -> tuple:
    """What decides the compiled kernels of a candidate (not the batch, and the key length only
    through what Triton specialises on): tasks with equal keys compile the same kernels."""
    batch, hq, hkv, seq_k, head_dim, dtype, cfg = task
    return (hq, hkv, head_dim, dtype, cfg, seq_k % 16 == 0, cfg.num_splits % 16 == 0)


def _compile_one(task) -> str:
    """Launch one candidate once on a small copy (batch 1, at most 4096 + the key length's
    remainder mod 16 keys): the same specialisations, so the same compiled kernels."""
    import torch

    from ..kernels.decode import decode_forward

    batch, hq, hkv, seq_k, head_dim, dtype, cfg = task
    small = seq_k if seq_k <= 4096 else 4096 + seq_k % 16
    tdtype = getattr(torch, dtype)
    try:
        q = torch.randn(1, hq, 1, head_dim, device="cuda", dtype=tdtype)
        k = torch.randn(1, hkv, small, head_dim, device="cuda", dtype=tdtype)
        decode_forward(q, k, k, causal_offset=None, scale=None, config=cfg)
        torch.cuda.synchronize()
    except Exception as exc:  # the timing process meets the failure again and skips it
        return f"{cfg.short()}: {type(exc).__name__}"
    return ""


def precompile(tasks: list, workers: int) -> None:
    """Compile every distinct candidate of `tasks` in `workers` spawned processes (Triton's
    on-disk cache then serves the timing process)."""
    import multiprocessing

    unique = list({_compile_key(t): t for t in tasks}.values())
    if workers < 2 or len(unique) < 2:
        return
    # By its import name: run as `python -m flashgen.tune.decode` this module is __main__, whose
    # functions a spawned process cannot always find.
    from . import decode as by_name

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(min(workers, len(unique))) as pool:
        for msg in pool.imap_unordered(by_name._compile_one, unique):
            if msg:
                print(f"precompile: {msg}", flush=True)


def tune_bucket(
    batch, hq, hkv, seq_k, head_dim, dtype, budget_s=30.0, space="all"
) -> dict | None:  # fmt: skip
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
    timed = []
    for cfg in bucket_candidates(batch, hq, hkv, seq_k, head_dim, dtype, space):
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
        timed.append((ms, cfg))
        if best is None or ms < best[0]:
            best = (ms, cfg)
    if best is None:
        return None
    ms, cfg = best
    nbytes = 2 * k.numel() * k.element_size()
    heuristic = hw.heuristic_config(head_dim, dtype, batch, hkv, hq // hkv, 1, seq_k)
    base_ms = next((t for t, c in timed if c == heuristic), None)
    return {
        "head_dim": head_dim, "dtype": dtype, "hkv": hkv, "group": hq // hkv,
        "bucket": list(hw.decode_bucket(batch, seq_k)),
        "config": {"block_n": cfg.block_n, "num_warps": cfg.num_warps,
                   "num_stages": cfg.num_stages, "num_splits": cfg.num_splits},
        "time_ms": ms, "tbs": nbytes / ms / 1e9, "timed": len(timed),
        "heuristic": heuristic.short(), "heuristic_ms": base_ms,
    }  # fmt: skip


def _us(ms) -> str:
    return "not timed" if ms is None else f"{ms * 1e3:.1f} us"


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"{what} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise SystemExit(f"{what} must be integers >= 1, got {text!r}")
    return values


def _heads(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        try:
            hq, hkv = (int(x) for x in item.split("/"))
        except ValueError:
            raise SystemExit(f"--heads must look like 32/8 or 32/8,32/32, got {text!r}") from None
        if hkv < 1 or hq % hkv:
            raise SystemExit(f"--heads: query heads must be a multiple of kv heads, got {item}")
        out.append((hq, hkv))
    return out


# (flag, argparse options, help) rows (`flashgen.core.flags`), in --help order.
_FLAGS = (
    ("--batch", {"default": "1,8,64"}, "batch sizes (comma-separated)"),
    ("--kv", {"default": "2048,8192,32768,65536"}, "key lengths (comma-separated)"),
    ("--heads", {"default": "32/8"}, "query heads / kv heads, e.g. 32/8 or 32/8,32/32"),
    ("--head-dim", {"default": "128"}, "head dims (comma-separated)"),
    ("--dtype", {"choices": ["float16", "bfloat16", "float32"], "default": "bfloat16"}, None),
    ("--budget", {"type": float, "default": 30.0}, "seconds per bucket at most"),
    ("--total", {"type": float, "default": float("inf")},
     "stop starting new buckets after this many seconds of timing (the file keeps what is done)"),
    ("--space", {"choices": ["all", "near"], "default": "all"},
     "all: every candidate; near: the short list near the heuristic default"),
    ("--workers", {"type": int, "default": 0},
     "compile every candidate first in this many processes (0: compile while timing)"),
    ("--out", {"required": True}, "JSON file to write (merged if it exists)"),
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m flashgen.tune.decode",
        description="Time every split-KV decode config per (batch, key length) bucket on this "
        "GPU and write the fastest as a decode configs file (see flashgen.hardware.decode).",
    )
    add_flags(p, _FLAGS)
    args = p.parse_args(argv)
    heads = _heads(args.heads)
    dims = _ints(args.head_dim, "--head-dim")
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
    import triton

    doc["measured_with"] = {"torch": torch.__version__, "triton": triton.__version__}
    buckets = [
        (d, hq, hkv, b, kv) for d in dims for hq, hkv in heads for b in batches for kv in kvs
    ]
    if args.workers > 1:
        t0 = time.monotonic()
        tasks = [
            (b, hq, hkv, kv, d, args.dtype, cfg)
            for d, hq, hkv, b, kv in buckets
            for cfg in bucket_candidates(b, hq, hkv, kv, d, args.dtype, args.space)
        ]
        precompile(tasks, args.workers)
        print(f"precompiled {len(tasks)} candidates in {time.monotonic() - t0:.1f} s", flush=True)
    end = time.monotonic() + args.total  # after the compiles: the timing's own budget
    for d, hq, hkv, batch, kv in buckets:
        if time.monotonic() > end:
            print("--total spent: stopping", flush=True)
            break
        rec = tune_bucket(batch, hq, hkv, kv, d, args.dtype, args.budget, args.space)
        if rec is None:
            print(f"b{batch} kv{kv} {hq}/{hkv} d{d}: no candidate ran", flush=True)
            continue
        key = {k: rec[k] for k in ("head_dim", "dtype", "hkv", "group", "bucket")}
        doc["records"] = [r for r in doc["records"] if {k: r.get(k) for k in key} != key] + [rec]
        cfg = rec["config"]
        print(
            f"b{batch} kv{kv} {hq}/{hkv} d{d}: n{cfg['block_n']} "
            f"w{cfg['num_warps']} s{cfg['num_stages']} x{cfg['num_splits']} "
            f"{rec['time_ms'] * 1e3:.1f} us {rec['tbs']:.2f} TB/s ({rec['timed']} timed; "
            f"heuristic {rec['heuristic']} {_us(rec['heuristic_ms'])})",
            flush=True,
        )
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
