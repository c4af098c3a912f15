"""Tiles for sliding windows, kernel by kernel, on a GPU (issue 16).

    python benchmarks/window_tiles.py [--out DIR] [--budget S] [--shape b,hq,hkv,n,d]

A window's edge tiles are partly masked, and how much of a tile a window leaves depends on
the tile: a causal window of 256 keys walked in 128-key tiles reads 384 keys a row for 257
visible, in 64-key tiles 320. So a windowed spec may want other tiles than the unmasked one
whose configs it runs today. For three windows (causal 256 and 1024, two-sided (512, 512)) at
the masks.py shape this script times, each kernel on its own (triton.testing.do_bench median,
L2 flushed):

- the Hopper forward (`flashgen.kernels.hopper.forward`) with each config of a short list
  (64- and 128-key tiles, ring depths, persistent or not), against the config it runs today;
- the split backward's dK/dV kernel (`backward(needs=(False, True, True))`, with the delta
  preprocessing) and dQ kernel (`needs=(True, False, False)`) with each TileConfig of a short
  list, against today's (the records' or defaults' config, and the dQ kernel's own).

Every output is compared with the one of today's config (max abs error relative to its
largest entry, below 2e-2 in bf16) and a config that differs is reported and not ranked.
Kernels compile first in parallel worker processes (Triton's on-disk cache); the main process
times. Writes <out>/window_tiles.json after every variant.
"""

from __future__ import annotations

import math
import os
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402

VARIANTS = (("causal_256", True, (256, 0)), ("causal_1024", True, (1024, 0)),
            ("two_sided_512", False, (512, 512)))  # fmt: skip
# HopperConfig fields: block_m, block_n, num_buf, consumers, num_warps, maxnreg, pingpong,
# persistent, dynamic (windowed kernels have no ping-pong)
FWD_CONFIGS = (
    (128, 128, 2, 2, 4, 168, False, False, False),
    (128, 128, 2, 2, 4, 168, False, True, True),
    (128, 64, 2, 2, 4, 168, False, False, False),
    (128, 64, 3, 2, 4, 168, False, False, False),
    (128, 64, 4, 2, 4, 168, False, False, False),
    (128, 64, 3, 2, 4, 168, False, True, False),
    (128, 64, 3, 2, 4, 168, False, True, True),
    (64, 64, 3, 1, 4, 248, False, False, False),
    (64, 128, 2, 1, 4, 248, False, False, False),
)
# TileConfig fields: block_m, block_n, num_warps, num_stages
BWD_CONFIGS = (
    (64, 64, 4, 2), (64, 64, 4, 3), (32, 64, 4, 2), (32, 64, 4, 3), (64, 128, 8, 2),
    (64, 128, 8, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3), (128, 128, 8, 2),
    (32, 128, 8, 3), (128, 32, 8, 3),
)  # fmt: skip
SMALL = (1, 2, 1, 1024, 128)  # the warm-up shape: the same kernels (lengths divisible by 16)


def _inputs(shape, seed=0):
    import torch

    b, hq, hkv, n, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
               for h in (hq, hkv, hkv))  # fmt: skip
    do = torch.randn(b, hq, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    return q, k, v, do


def _fwd(q, k, v, causal, window, cfg):
    """The Hopper forward with HopperConfig fields `cfg` (None: the path's own choice)."""
    import torch

    from flashgen.core.hopper_config import HopperConfig
    from flashgen.core.spec import spec_for
    from flashgen.kernels import fwd, hopper

    scale = 1.0 / math.sqrt(q.shape[-1])
    if cfg is None:
        return fwd.forward(q, k, v, causal=causal, scale=scale, window=window)
    spec = spec_for(q.shape[-1], causal, "bfloat16", "fwd", True, False)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    hopper.forward(q, k, v, out, lse, scale=scale, spec=spec, config=HopperConfig(*cfg),
                   window=window)  # fmt: skip
    return out, lse


def _bwd(do, q, k, v, out, lse, causal, window, cfg, part):
    """The split backward's dK/dV (`part` "dkdv") or dQ ("dq") kernel with TileConfig fields
    `cfg` (None: the path's own choice), plus the delta preprocessing."""
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward

    needs = (False, True, True) if part == "dkdv" else (True, False, False)
    config = None if cfg is None else TileConfig(*cfg)
    return backward(do, q, k, v, out, lse, causal=causal, scale=1.0 / math.sqrt(q.shape[-1]),
                    config=config, dq_config=config if part == "dq" else None, needs=needs,
                    window=window, kind="split")  # fmt: skip


def warm(job):
    """Compile and launch one (direction, causal, config) on a small shape: None, or the error."""
    kind, causal, cfg = job
    try:
        window = (256, 0) if causal else (256, 256)
        q, k, v, do = _inputs(SMALL)
        out, lse = _fwd(q, k, v, causal, window, cfg if kind == "fwd" else None)
        if kind != "fwd":
            _bwd(do, q, k, v, out, lse, causal, window, cfg, kind)
        __import__("torch").cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - reported per config
        return scripts.error_text(exc)


def _runner(part, cfg, tensors, causal, window):
    """A call of one kernel (`part` "fwd", "dkdv" or "dq") with config fields `cfg`."""
    q, k, v, do, out, lse = tensors
    if part == "fwd":
        return lambda: _fwd(q, k, v, causal, window, cfg)
    return lambda: _bwd(do, q, k, v, out, lse, causal, window, cfg, part)


def _err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def main(argv=None) -> int:
    ap = scripts.parser(__doc__, budget=300.0)
    ap.add_argument("--out", default=None, help="a directory or file (default: $OUT or .)")
    ap.add_argument("--shape", default="4,16,4,4096,128", help="b,hq,hkv,n,d")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rep", type=int, default=30, help="do_bench rep (ms)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("window_tiles.py times GPU kernels: no CUDA device here", file=sys.stderr)
        return 1
    start = time.time()
    shape = tuple(int(x) for x in args.shape.split(","))
    jobs = [("fwd", c, cfg) for c in (True, False) for cfg in FWD_CONFIGS]
    jobs += [(p, c, cfg) for p in ("dkdv", "dq") for c in (True, False) for cfg in BWD_CONFIGS]
    errors, _ = scripts.warm_and_check(args.workers, warm, jobs, lambda _: None, [])
    print(f"compiled {len(jobs)} kernels in {time.time() - start:.0f} s, "
          f"{len(errors)} failed", flush=True)  # fmt: skip
    for job, err in errors.items():
        print("  FAILED", job, err, flush=True)
    path = scripts.out_path(args.out, "window_tiles.json")
    doc = scripts.result_doc(shape=shape, compile_errors=errors, rows=[])
    timer = scripts.timer("cuda", args.rep)
    q, k, v, do = _inputs(shape)
    for name, causal, window in VARIANTS:
        if not scripts.within(start, args.budget):
            print("budget spent", flush=True)
            break
        out, lse = _fwd(q, k, v, causal, window, None)
        want = {"fwd": out}
        want["dkdv"] = _bwd(do, q, k, v, out, lse, causal, window, None, "dkdv")
        want["dq"] = _bwd(do, q, k, v, out, lse, causal, window, None, "dq")
        parts = (("fwd", FWD_CONFIGS), ("dkdv", BWD_CONFIGS), ("dq", BWD_CONFIGS))
        for part, configs in parts:
            for cfg in (None, *configs):
                if cfg is not None and repr((part, causal, cfg)) in errors:
                    continue
                fn = _runner(part, cfg, (q, k, v, do, out, lse), causal, window)
                try:
                    got = fn()
                    if part == "fwd":
                        err = _err(got[0], want["fwd"])
                    else:
                        err = max(_err(g, w) for g, w in zip(got, want[part], strict=True)
                                  if g is not None)  # fmt: skip
                    ms = timer(fn) if err < 2e-2 else None
                except Exception as exc:  # noqa: BLE001 - reported per config
                    err, ms = None, None
                    print(f"  {name} {part} {cfg}: {scripts.error_text(exc)}", flush=True)
                row = dict(variant=name, causal=causal, window=window, part=part,
                           config="today" if cfg is None else list(cfg), ms=ms, err=err)  # fmt: skip
                doc["rows"].append(row)
                ms_text = "-" if ms is None else f"{ms:.4f}"
                print(f"{name:14s} {part:5s} {row['config']!s:55s} {ms_text:>8s} ms  "
                      f"err {err if err is None else round(err, 5)}", flush=True)  # fmt: skip
        scripts.save_json(path, doc)
        torch.cuda.synchronize()
    scripts.save_json(path, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
