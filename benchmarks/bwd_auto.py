"""Are the hopper backward kind's default tables current? Times the split and hopper kinds side
by side for every key of `flashgen.kernels.hopper_bwd`'s tables and says, per key, from which
key length the hopper kind read faster, next to the length the shipped table names.

    python benchmarks/bwd_auto.py [--tables AUTO_EXTRAS,AUTO_WINDOW] [--lengths 512,1024,2048,4096]
        [--tokens 8192] [--rounds 3] [--margin 0.02] [--budget 500] [--out auto.json]
    python benchmarks/bwd_auto.py --smoke     (the CPU: Triton's interpreter, tiny shapes; the
                                               hopper kind falls back to split there)

Why: the tables are measurements (sessions 19-27 on the H200), and both kinds changed after
them; session 49 found the key-padding masks' entries stale by 7-34% (`benchmarks/RESULTS.md`).
Each key is a (head dim, causal, variant) the table is read with (`hopper_bwd.auto_choice`):

- AUTO (head dim, causal): no extras, 16 heads; AUTO_GROUPED: the same with 16 query heads on 4
  kv heads;
- AUTO_EXTRAS (head dim, causal, mask): "" key lengths (right padding, `padding.bounds`), "bool"
  / "add" a key-padding mask (HF's finfo.min for "add") with its key hull, as the op passes it;
  each entry keeps 50-100% of its keys (seeded);
- AUTO_WINDOW (head dim, causal, with a key-padding mask): a causal window of min(1024, n / 2)
  keys or a two-sided one of min(512, n / 4) each side;
- AUTO_SCORE_MODS (head dim, causal, mod): softcap 30, ALiBi (the usual geometric slopes), or
  dropout p = 0.1.

Every case has --tokens query rows in all (batch = tokens / n), bf16, random inputs; the forward
is flashgen's own; the backward alone is timed (`bwd.backward(kind=...)`, do_bench medians,
`--rounds` alternating readings each). A key's suggested length is the shortest of --lengths
from which every longer one read split / hopper >= 1 + --margin ("none" if no such length).
The JSON (--out) holds every reading; the summary prints one line per key.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

TABLES = ("AUTO", "AUTO_GROUPED", "AUTO_EXTRAS", "AUTO_WINDOW", "AUTO_SCORE_MODS")


def keys_of(table: str):
    """Every key `table` is read with (listed or not), in a fixed order."""
    base = [(d, c) for d in (64, 128) for c in (False, True)]
    if table in ("AUTO", "AUTO_GROUPED"):
        return base
    variants = {
        "AUTO_EXTRAS": ("", "bool", "add"),
        "AUTO_WINDOW": (False, True),
        "AUTO_SCORE_MODS": ("softcap", "alibi", "dropout"),
    }[table]
    return [(*k, v) for k in base for v in variants]


def case(table: str, key, n: int, tokens: int, heads: int, device: str, dtype):
    """(q, k, v, do, forward kwargs, backward kwargs) of one timed call."""
    import torch

    from flashgen.kernels.padding import bounds as seq_bounds
    from flashgen.kernels.padding import key_hull

    d, causal = key[0], key[1]
    b = max(tokens // n, 1)
    hkv = heads // 4 if table == "AUTO_GROUPED" else heads
    gen = torch.Generator().manual_seed(n * 131 + d)
    q, do = (torch.randn(b, heads, n, d, generator=gen).to(dtype).to(device) for _ in range(2))
    k, v = (torch.randn(b, hkv, n, d, generator=gen).to(dtype).to(device) for _ in range(2))
    common = {"causal": causal}
    extra: dict = {}
    lens = (n * (0.5 + 0.5 * torch.rand(b, generator=gen))).long().clamp(1, n)
    if table == "AUTO_EXTRAS" and key[2] == "":
        extra["bounds"] = seq_bounds(b, n, n, lens, None, "right", device)
    elif table == "AUTO_EXTRAS" or (table == "AUTO_WINDOW" and key[2]):
        keep = torch.arange(n)[None, :] < lens[:, None]
        if table == "AUTO_EXTRAS" and key[2] == "add":
            low = torch.finfo(dtype).min
            m = torch.zeros(b, n, dtype=dtype).masked_fill(~keep, low)
        else:
            m = keep
        mask = m.to(device)[:, None, None, :].expand(b, heads, n, n)
        extra.update(bounds=key_hull(mask), mask=mask, rows_whole=True)
    if table == "AUTO_WINDOW":
        extra["window"] = (min(1024, n // 2), 0) if causal else (min(512, n // 4),) * 2
    if table == "AUTO_SCORE_MODS":
        mod = key[2]
        if mod == "softcap":
            extra["softcap"] = 30.0
        elif mod == "alibi":
            slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, dtype=torch.float32) / heads)
            extra["alibi"] = slopes.to(device).expand(b, heads)
        else:
            extra["dropout"] = (0.1, 1234)
    return q, k, v, do, {**common, **extra}, {**common, **extra, "scale": d**-0.5}


def timer(device: str):
    """(ms of one call) the GPU's do_bench median, or one call's wall time on the CPU."""
    if device == "cuda":
        from triton.testing import do_bench

        return lambda f: do_bench(f, warmup=25, rep=100, return_mode="median")

    def once(f):
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1e3

    return once


def measure(table, key, n, args, device, dtype, clock) -> dict:
    """split ms, hopper ms (medians of args.rounds alternating readings) and their ratio."""
    from flashgen.kernels import bwd
    from flashgen.kernels.fwd import forward

    q, k, v, do, fwd_kw, bwd_kw = case(table, key, n, args.tokens, args.heads, device, dtype)
    out, lse = forward(q, k, v, scale=None, **fwd_kw)
    runs = {
        kind: functools.partial(bwd.backward, do, q, k, v, out, lse, kind=kind, **bwd_kw)
        for kind in ("split", "hopper")
    }
    for f in runs.values():  # compile both first
        f()
    got = {kind: [] for kind in runs}
    for _ in range(args.rounds):
        for kind, f in runs.items():
            got[kind].append(clock(f))
    split, hopper = (statistics.median(got[x]) for x in ("split", "hopper"))
    return {"split_ms": split, "hopper_ms": hopper, "ratio": split / hopper, "readings": got}


def suggested(ratios: dict[int, float], margin: float):
    """The shortest length from which every longer one read >= 1 + margin, or None."""
    best = None
    for n in sorted(ratios, reverse=True):
        if ratios[n] < 1.0 + margin:
            break
        best = n
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tables", default=",".join(TABLES), help="comma-separated table names")
    p.add_argument("--lengths", default="512,1024,2048,4096", help="key lengths (= query rows)")
    p.add_argument("--tokens", type=int, default=8192, help="query rows a call, all entries")
    p.add_argument("--heads", type=int, default=16, help="query heads (GQA keys: a quarter kv)")
    p.add_argument("--rounds", type=int, default=3, help="alternating readings a kind")
    p.add_argument("--margin", type=float, default=0.02, help="the hopper kind's lead to count")
    p.add_argument("--budget", type=float, default=500.0, help="seconds; stop starting keys then")
    p.add_argument("--out", default=None, help="JSON of every reading")
    p.add_argument("--smoke", action="store_true", help="the CPU through Triton's interpreter")
    args = p.parse_args(argv)
    tables = [t.strip() for t in args.tables.split(",") if t.strip()]
    bad = [t for t in tables if t not in TABLES]
    if bad:
        p.error(f"--tables: unknown {', '.join(bad)} (known: {', '.join(TABLES)})")
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        lengths, args.tokens, args.heads, args.rounds = [48], 48, 4, 1
    import torch

    from flashgen.kernels import hopper_bwd

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        p.error("needs a CUDA GPU (or --smoke)")
    clock = timer(device)
    start = time.monotonic()
    results = []
    for table in tables:
        shipped = getattr(hopper_bwd, table)
        for key in keys_of(table):
            if time.monotonic() - start > args.budget:
                print(f"budget of {args.budget:.0f} s spent: stopped before {table} {key}")
                break
            ratios, rows = {}, {}
            try:
                for n in lengths:
                    rows[n] = measure(table, key, n, args, device, torch.bfloat16, clock)
                    ratios[n] = rows[n]["ratio"]
            except ValueError as e:  # kind="hopper" has no kernel for this key's spec
                print(f"{table} {key}: refused: {e}", flush=True)
                results.append({"table": table, "key": list(key), "refused": str(e)})
                continue
            least = suggested(ratios, args.margin)
            entry = {"table": table, "key": list(key), "shipped": shipped.get(key),
                     "suggested": least, "by_length": rows}  # fmt: skip
            results.append(entry)
            read = " ".join(f"{n}:{r:.3f}" for n, r in ratios.items())
            print(f"{table} {key}: shipped {shipped.get(key)} suggested {least} ({read})",
                  flush=True)  # fmt: skip
            if args.out:
                with open(args.out, "w") as f:
                    json.dump({"device": torch.cuda.get_device_name() if device == "cuda"
                               else "cpu", "results": results}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
