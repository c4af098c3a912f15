"""Tiles for masked attention, kernel by kernel, on a GPU (issue 16).

    python benchmarks/masked_tiles.py [--out DIR] [--budget S] [--shape b,hq,hkv,n,d]
                                      [--only NAME,...]

A masked spec runs the configs of the unmasked one (or the defaults), but its best tiles may
differ. A window's edge tiles are partly masked, and how much of a tile a window leaves
depends on the tile: a causal window of 256 keys walked in 128-key tiles reads 384 keys a row
for 257 visible, in 64-key tiles 320. A mask tensor adds a tile load and a few operations a
score to every step. For each variant (causal windows of 256 and 1024 keys, a two-sided
(512, 512) window, a [1, H, N, N] additive bias with causal, HF's [B, 1, N, N] boolean
causal+padding mask and its [B, 1, 1, N] additive key padding, causal dropout of p = 0.1 and a
causal softcap of 30) at the masks.py shape this script times, each kernel on its own (triton.testing.do_bench median, L2 flushed):

- the forward: windows and softcap in the Hopper family (a plan built once per config, launched as
  `flashgen.kernels.fwd` does) with each config of a short list; mask tensors and dropout in the
  portable family with each TileConfig of a short list;
- the split backward's dK/dV kernel (`backward(needs=(False, True, True))`, with the delta
  preprocessing) and dQ kernel (`needs=(True, False, False)`) with each TileConfig of a short
  list;

each against the config the call runs today ("today", printed). Every output is compared with
today's (max abs error relative to its largest entry, below 2e-2 in bf16); a config that
differs is reported and not timed. Kernels compile first in parallel worker processes
(Triton's on-disk cache); the main process times. Writes <out>/masked_tiles.json after every
variant.
"""

from __future__ import annotations

import math
import os
import sys
import time

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from flashgen.bench import scripts  # noqa: E402

# name, causal, what the call gets: a window (left, right), or a mask tensor's kind
VARIANTS = (
    ("causal_256", True, {"window": (256, 0)}),
    ("causal_1024", True, {"window": (1024, 0)}),
    ("two_sided_512", False, {"window": (512, 512)}),
    ("bias_1hnn_causal", True, {"mask": "bias"}),
    ("bool_b1nn", False, {"mask": "bool"}),
    ("add_b11n", False, {"mask": "add_pad"}),
    ("dropout_causal", True, {"dropout": 0.1}),
    ("softcap_causal", True, {"softcap": 30.0}),
)
# Windows and softcap: HopperConfig fields (block_m, block_n, num_buf, consumers, num_warps, maxnreg,
# pingpong, persistent, dynamic; windowed kernels have no ping-pong)
HOPPER_CONFIGS = (
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
# Mask tensors' and dropout's forward (portable family) and every backward: TileConfig fields (block_m,
# block_n, num_warps, num_stages)
PORTABLE_FWD_CONFIGS = (
    (128, 64, 4, 2), (128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3), (64, 64, 4, 4),
    (128, 128, 8, 3), (64, 128, 4, 3), (128, 32, 4, 3), (128, 64, 4, 4),
)  # fmt: skip
BWD_CONFIGS = (
    (64, 64, 4, 2), (64, 64, 4, 3), (32, 64, 4, 2), (32, 64, 4, 3), (64, 128, 8, 2),
    (64, 128, 8, 3), (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3), (128, 128, 8, 2),
    (32, 128, 8, 3), (128, 32, 8, 3), (32, 64, 4, 4),
)  # fmt: skip
SMALL = (2, 2, 1, 1024, 128)  # the warm-up shape: the same kernels (lengths divisible by 16)


def _kind(extra) -> str:
    """What a variant adds: "window", "softcap", "dropout", or its mask tensor's kind."""
    for kind in ("window", "softcap", "dropout"):
        if kind in extra:
            return kind
    return extra["mask"]


def _inputs(shape, extra, seed=0):
    """q, k, v, dO (bf16) and the call's keywords: the window, the softcap, dropout's (p,
    seed), or the mask tensor expanded to [B, Hq, N, N] as the kernels take it."""
    import torch

    from flashgen.kernels.validate import expand_mask

    b, hq, hkv, n, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
               for h in (hq, hkv, hkv))  # fmt: skip
    do = torch.randn(b, hq, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    if "dropout" in extra:
        return q, k, v, do, {"dropout": (extra["dropout"], 2**40 + seed)}
    kind = extra.get("mask")
    if kind is None:
        return q, k, v, do, dict(extra)
    lens = torch.randint(n // 4, n + 1, (b,), device="cuda", generator=gen)
    lens[0] = n
    keep = torch.arange(n, device="cuda")[None, :] < lens[:, None]
    if kind == "bias":  # a T5-like bias shared by the batch entries
        mask = torch.randn(1, hq, n, n, device="cuda", generator=gen, dtype=torch.bfloat16)
    elif kind == "bool":  # HF's 4-D mask of a padded decoder batch, shared by the heads
        tri = torch.ones(n, n, dtype=torch.bool, device="cuda").tril()
        mask = tri[None, None] & keep[:, None, None, :]
    else:  # HF's additive key padding of an encoder batch (finfo.min on the padding)
        mask = torch.zeros(b, 1, 1, n, device="cuda", dtype=torch.bfloat16)
        mask = mask.masked_fill(~keep[:, None, None, :], torch.finfo(torch.bfloat16).min)
    return q, k, v, do, {"mask": expand_mask(mask, q, k)}


def _fwd(q, k, v, causal, kw, cfg):
    """A call of the forward with config fields `cfg` (None: the path's own choice). A window
    or a softcap takes the Hopper family: a plan built once, launched as `flashgen.kernels.fwd`
    does (`hopper.forward` launches through Gluon's JIT, whose host time would be timed too);
    a mask tensor or dropout the portable family with that TileConfig."""
    import torch

    from flashgen.core.config import TileConfig
    from flashgen.core.hopper_config import HopperConfig
    from flashgen.core.spec import spec_for
    from flashgen.kernels import fwd, hopper
    from flashgen.kernels.launch import direct_device

    scale = 1.0 / math.sqrt(q.shape[-1])
    if cfg is None or not _hopper(kw):
        config = None if cfg is None else TileConfig(*cfg)
        return lambda: fwd.forward(q, k, v, causal=causal, scale=scale, config=config, **kw)
    window, softcap = kw.get("window"), kw.get("softcap")
    spec = spec_for(q.shape[-1], causal, "bfloat16", "fwd", window is not None, softcap is not None)
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    run = hopper.plan(spec, HopperConfig(*cfg), q, k, v, out, direct_device(q, True))
    args = hopper.call_args(spec, q, k, v, out, lse, scale, window, softcap, None, None)

    def call():
        run(*args)
        return out, lse

    return call


def _bwd(do, q, k, v, out, lse, causal, kw, cfg, part):
    """The split backward's dK/dV (`part` "dkdv") or dQ ("dq") kernel with TileConfig fields
    `cfg` (None: the path's own choice), plus the delta preprocessing."""
    from flashgen.core.config import TileConfig
    from flashgen.kernels.bwd import backward

    needs = (False, True, True) if part == "dkdv" else (True, False, False)
    config = None if cfg is None else TileConfig(*cfg)
    return backward(do, q, k, v, out, lse, causal=causal, scale=1.0 / math.sqrt(q.shape[-1]),
                    config=config, dq_config=config if part == "dq" else None, needs=needs,
                    kind="split", **kw)  # fmt: skip


def _hopper(extra) -> bool:
    """Whether the variant's forward runs in the Hopper family (windows, softcap)."""
    return "window" in extra or "softcap" in extra


def _fwd_configs(extra) -> tuple:
    return HOPPER_CONFIGS if _hopper(extra) else PORTABLE_FWD_CONFIGS


def _jobs(variants) -> list:
    """(part, causal, the variant's keywords, config) to compile: one per kernel and config."""
    jobs, seen = [], set()
    for _, causal, extra in variants:
        kind = _kind(extra)
        if (kind, causal) in seen:
            continue
        seen.add((kind, causal))
        jobs += [("fwd", causal, extra, cfg) for cfg in _fwd_configs(extra)]
        jobs += [(p, causal, extra, cfg) for p in ("dkdv", "dq") for cfg in BWD_CONFIGS]
    return jobs


def _job_key(part, causal, extra, cfg) -> str:
    return f"{part} {_kind(extra)} {'causal' if causal else 'full'} {cfg}"


def warm(job):
    """Compile and launch one (part, causal, variant, config) on a small shape: None, or the
    error."""
    part, causal, extra, cfg = job
    try:
        q, k, v, do, kw = _inputs(SMALL, extra)
        out, lse = _fwd(q, k, v, causal, kw, cfg if part == "fwd" else None)()
        if part != "fwd":
            _bwd(do, q, k, v, out, lse, causal, kw, cfg, part)
        __import__("torch").cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001 - reported per config
        return scripts.error_text(exc)


def _today(q, causal, kw) -> dict:
    """The configs "today" ran: the forward's and the backward plans' launches."""
    from flashgen.core.spec import spec_for
    from flashgen.kernels import bwd, fwd, hopper

    today = {}
    if _hopper(kw):
        window, softcap = "window" in kw, "softcap" in kw
        spec = spec_for(q.shape[-1], causal, "bfloat16", "fwd", window, softcap)
        today["fwd"] = str(hopper.for_spec(hopper.config_for(spec, q.shape[2]), spec))
    for i, plan in enumerate(fwd._plans.values()):
        if plan.hopper is None:
            today[f"fwd{i}"] = {**plan.run.constexprs, **plan.run.options}
    for i, plan in enumerate(bwd._plans.values()):
        for part in ("dkdv", "dq"):
            launch = getattr(plan, part, None)
            if launch is not None:
                today[f"{part}{i}"] = {**launch.constexprs, **launch.options}
    return today


def _runner(part, cfg, tensors, causal, kw):
    """A call of one kernel (`part` "fwd", "dkdv" or "dq") with config fields `cfg`."""
    q, k, v, do, out, lse = tensors
    if part == "fwd":
        return _fwd(q, k, v, causal, kw, cfg)
    return lambda: _bwd(do, q, k, v, out, lse, causal, kw, cfg, part)


def _err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def main(argv=None) -> int:
    ap = scripts.parser(__doc__, budget=300.0)
    ap.add_argument("--out", default=None, help="a directory or file (default: $OUT or .)")
    ap.add_argument("--shape", default="4,16,4,4096,128", help="b,hq,hkv,n,d")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--parts", default="fwd,dkdv,dq", help="which kernels to time")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--rep", type=int, default=30, help="do_bench rep (ms)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("masked_tiles.py times GPU kernels: no CUDA device here", file=sys.stderr)
        return 1
    from flashgen.kernels import bwd, fwd

    start = time.time()
    shape = tuple(int(x) for x in args.shape.split(","))
    only = {x for x in args.only.split(",") if x}
    variants = [v for v in VARIANTS if not only or v[0] in only]
    parts_wanted = set(args.parts.split(","))
    jobs = [job for job in _jobs(variants) if job[0] in parts_wanted]
    errors, _ = scripts.warm_and_check(args.workers, warm, jobs, lambda _: None, [])
    keys = {repr(job): _job_key(*job) for job in jobs}  # warm_and_check keys by repr(job)
    errors = {keys[job]: err for job, err in errors.items()}
    print(f"compiled {len(jobs)} kernels in {time.time() - start:.0f} s, "
          f"{len(errors)} failed", flush=True)  # fmt: skip
    for job, err in errors.items():
        print("  FAILED", job, err, flush=True)
    path = scripts.out_path(args.out, "masked_tiles.json")
    doc = scripts.result_doc(shape=shape, compile_errors=errors, rows=[])
    timer = scripts.timer("cuda", args.rep)
    for name, causal, extra in variants:
        if not scripts.within(start, args.budget):
            print("budget spent", flush=True)
            break
        q, k, v, do, kw = _inputs(shape, extra)
        fwd._plans.clear()  # so that _today lists only the plans of today's configs
        bwd._plans.clear()
        out, lse = _fwd(q, k, v, causal, kw, None)()
        want = {"fwd": out}
        want["dkdv"] = _bwd(do, q, k, v, out, lse, causal, kw, None, "dkdv")
        want["dq"] = _bwd(do, q, k, v, out, lse, causal, kw, None, "dq")
        today = _today(q, causal, kw)
        print(f"{name}: today's configs {today}", flush=True)
        doc.setdefault("today", {})[name] = today
        parts = (("fwd", _fwd_configs(extra)), ("dkdv", BWD_CONFIGS), ("dq", BWD_CONFIGS))
        parts = tuple(p for p in parts if p[0] in parts_wanted)
        for part, configs in parts:
            for cfg in (None, *configs):
                if cfg is not None and _job_key(part, causal, extra, cfg) in errors:
                    continue
                fn = _runner(part, cfg, (q, k, v, do, out, lse), causal, kw)
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
                row = dict(variant=name, causal=causal, part=part,
                           config="today" if cfg is None else list(cfg), ms=ms, err=err)  # fmt: skip
                doc["rows"].append(row)
                ms_text = "-" if ms is None else f"{ms:.4f}"
                print(f"{name:16s} {part:5s} {row['config']!s:55s} {ms_text:>8s} ms  "
                      f"err {err if err is None else round(err, 5)}", flush=True)  # fmt: skip
        scripts.save_json(path, doc)
        torch.cuda.synchronize()
    scripts.save_json(path, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
