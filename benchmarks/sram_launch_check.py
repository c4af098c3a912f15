"""Launch check of the shared-memory model on a real GPU: OutOfResources or not, vs `sram.fits`.

The CPU comparison (benchmarks/sram_vs_compiler.py) trusts the compiler's byte count; this is
the ground truth it stands for. For each spec (head dim 64/128/256, bf16, causal alternating,
forward and backward) it launches a sample of configs through the real host code
(`flashgen.kernels.fwd.forward` with the TMA kernel and with the pointer kernel, FLASHGEN_FWD_TMA=1/0;
`flashgen.kernels.bwd.backward` once for the dK/dV kernel and once for the dQ kernel, each as the TMA
and the pointer build on Hopper, FLASHGEN_BWD_TMA=1/0) and records
whether the launch raised OutOfResources. The sample, in priority order: the configs known to
fail on the H200 (head dim 128, BLOCK_N 128, 4 stages), then the configs the model puts nearest
the device's limit on either side (where a wrong model would show), then a few fixed others.
A time budget (default 150 s) stops it early; what ran is written.

Run on the GPU machine from the checkout (needs only torch, triton, jinja2):

    PYTHONPATH=. python3 benchmarks/sram_launch_check.py [--budget-s 150]

Writes $OUT/sram_launch_check.json (or ./sram_launch_check.json without $OUT): the device, the
versions, one row per launch (spec, config, kernel, model bytes, model fits, launched, error),
and a summary: false admits (model fits, launch ran out of shared memory: must be 0) and
false rejects (model says no, launch ran). Exit status 1 when there is a false admit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(Path(__file__).resolve().parent.parent))

from flashgen.core.config import TileConfig  # noqa: E402
from flashgen.core.spec import KernelSpec  # noqa: E402
from flashgen.hardware import sram
from flashgen.hardware import tiles as space  # noqa: E402

KNOWN_FAILURES = [TileConfig(64, 128, 4, 4), TileConfig(128, 128, 4, 4), TileConfig(128, 128, 8, 4)]
HEAD_DIMS = (128, 64, 256)
NEAR_LIMIT = 4  # per spec and side of the limit
OTHERS = 2


def sample(spec: KernelSpec, device: sram.DeviceLimits) -> list[TileConfig]:
    """Known failures (head dim 128 forward), the nearest-to-limit configs both sides, others."""
    cands = space.candidates(spec)
    limit = device.smem_optin_bytes
    bytes_of = {c: sram.smem_bytes(spec, c, device.capability) for c in cands}
    inside = sorted((c for c in cands if bytes_of[c] <= limit), key=lambda c: -bytes_of[c])
    outside = sorted((c for c in cands if bytes_of[c] > limit), key=lambda c: bytes_of[c])
    picked = [c for c in KNOWN_FAILURES if spec.head_dim == 128 and spec.direction == "fwd"]
    for a, b in zip(inside[:NEAR_LIMIT], outside[:NEAR_LIMIT], strict=False):
        picked += [a, b]
    rest = [c for c in cands if c not in picked]
    picked += random.Random(f"launch|{spec.uri()}").sample(rest, min(OTHERS, len(rest)))
    seen: list[TileConfig] = []
    for c in picked:
        if c not in seen:
            seen.append(c)
    return seen


def plan(device: sram.DeviceLimits) -> list[tuple[KernelSpec, list[TileConfig], list[str]]]:
    """(spec, configs, kernel names) per spec; causal alternates over the specs."""
    jobs = []
    for i, d in enumerate(HEAD_DIMS):
        for j, direction in enumerate(("fwd", "bwd")):
            spec = KernelSpec(d, bool((i + j) % 2), "bfloat16", direction)
            kernels = sram.kernel_bytes(spec, TileConfig(64, 64, 4, 2), device.capability)
            jobs.append((spec, sample(spec, device), sorted(kernels)))
    return jobs


def _is_oor(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfResources" or "out of resource" in str(exc).lower()


def launch(spec: KernelSpec, cfg: TileConfig, kernel: str, tensors: dict) -> dict:
    """Run one kernel of (spec, cfg); report whether it launched."""

    from flashgen.kernels import bwd, fwd

    q, k, v, do, out, lse = (tensors[n] for n in ("q", "k", "v", "do", "out", "lse"))
    t0 = time.time()
    try:
        if kernel in ("attn_fwd_tma", "attn_fwd"):
            os.environ["FLASHGEN_FWD_TMA"] = "1" if kernel == "attn_fwd_tma" else "0"
            fwd.forward(q, k, v, causal=spec.causal, scale=None, config=cfg)
        else:
            os.environ["FLASHGEN_BWD_TMA"] = "1" if kernel.endswith("_tma") else "0"
            needs = (False, True, True) if "dkdv" in kernel else (True, False, False)
            bwd.backward(
                do, q, k, v, out, lse, causal=spec.causal, scale=q.shape[-1] ** -0.5,
                config=cfg, needs=needs,
            )  # fmt: skip
        _sync(q)
        return {"launched": True, "secs": round(time.time() - t0, 2)}
    except Exception as exc:
        _sync(q)
        return {
            "launched": False,
            "out_of_resources": _is_oor(exc),
            "error": f"{type(exc).__name__}: {str(exc)[:200]}",
            "secs": round(time.time() - t0, 2),
        }
    finally:
        os.environ.pop("FLASHGEN_FWD_TMA", None)
        os.environ.pop("FLASHGEN_BWD_TMA", None)


def _sync(t) -> None:
    import torch

    if t.is_cuda:
        torch.cuda.synchronize()


def make_tensors(spec: KernelSpec, seq: int = 512, device: str = "cuda") -> dict:
    import torch

    from flashgen.kernels import fwd

    gen = torch.Generator(device=device).manual_seed(0)
    shape = (1, 2, seq, spec.head_dim)
    # bf16 on the GPU; the CPU interpreter (--smoke) cannot do bf16 dots, so fp16 there.
    dtype = torch.bfloat16 if device == "cuda" else torch.float16
    q, k, v, do = (torch.randn(shape, device=device, dtype=dtype, generator=gen) for _ in range(4))
    out, lse = fwd.forward(q, k, v, causal=spec.causal, scale=None, config=space.safe_config(spec))
    return {"q": q, "k": k, "v": v, "do": do, "out": out, "lse": lse}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget-s", type=float, default=150.0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plan", action="store_true", help="print the sample and exit (no GPU)")
    parser.add_argument(
        "--smoke", action="store_true", help="CPU interpreter, one small config per spec"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    if args.plan:
        device = sram.current_device()
        for spec, cfgs, kernels in plan(device):
            print(spec.uri(), kernels, [c.short() for c in cfgs])
        return 0
    import torch
    import triton

    if not torch.cuda.is_available() and not args.smoke:
        print("needs a CUDA GPU (or --smoke)", file=sys.stderr)
        return 2
    device = sram.current_device()
    where = "cpu" if args.smoke else "cuda"
    out_path = args.out or Path(os.environ.get("OUT", ".")) / "sram_launch_check.json"
    rows: list[dict] = []
    deadline = time.time() + args.budget_s
    jobs = plan(device)
    if args.smoke:
        jobs = [(spec, [TileConfig(16, 16, 2, 1)], kernels) for spec, _, kernels in jobs[:2]]
    # Round-robin over specs so a spent budget still leaves every spec sampled.
    depth = max(len(cfgs) for _, cfgs, _ in jobs)
    tensors: dict[KernelSpec, dict] = {}
    stopped = False
    for n in range(depth):
        for spec, cfgs, kernels in jobs:
            if n >= len(cfgs) or stopped:
                continue
            if time.time() > deadline:
                stopped = True
                continue
            cfg = cfgs[n]
            if spec.with_direction("fwd") not in tensors:
                fwd_spec = spec.with_direction("fwd")
                seq = 32 if args.smoke else 512
                tensors[fwd_spec] = make_tensors(fwd_spec, seq, where)
            per_model = sram.kernel_bytes(spec, cfg, device.capability)
            for kernel in kernels:
                result = launch(spec, cfg, kernel, tensors[spec.with_direction("fwd")])
                row = {
                    "spec": spec.uri(), "config": cfg.as_dict(), "kernel": kernel,
                    "model_bytes": per_model[kernel],
                    "model_fits": per_model[kernel] <= device.smem_optin_bytes,
                    **result,
                }  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    oor = [r for r in rows if not r["launched"] and r.get("out_of_resources")]
    other = [r for r in rows if not r["launched"] and not r.get("out_of_resources")]
    false_admits = [r for r in oor if r["model_fits"]]
    false_rejects = [r for r in rows if r["launched"] and not r["model_fits"]]
    summary = {
        "launches": len(rows),
        "out_of_resources": len(oor),
        "other_errors": len(other),
        "false_admits": len(false_admits),
        "false_rejects": len(false_rejects),
        "stopped_by_budget": stopped,
    }
    report = {
        "device": {
            "name": device.name,
            "capability": device.capability,
            "sm_count": device.sm_count,
            "smem_optin_bytes": device.smem_optin_bytes,
        },
        "torch": torch.__version__,
        "triton": triton.__version__,
        "summary": summary,
        "false_admits": false_admits,
        "false_rejects": false_rejects,
        "rows": rows,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=1))
    print(json.dumps(summary))
    return 1 if false_admits else 0


if __name__ == "__main__":
    sys.exit(main())
