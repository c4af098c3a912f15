"""Host time per attention call, flashgen beside PyTorch SDPA in one process (needs CUDA).

What is measured: the CPU time a call takes to return, on an input so small (default
1x1x128x64 bf16) that the GPU finishes each kernel long before the host issues the next one,
so the call's cost is its host work (Python layers, dispatch, allocation, kernel launch).

Method: for each case, warm up, then `--rounds` rounds, each of `--calls` back-to-back calls:
synchronize, read `time.perf_counter()`, run the calls without any synchronization, read the
clock again (host time per call = elapsed / calls), then synchronize and read it once more
(wall time per call, GPU drain included). In a launch-bound regime the two agree; if wall time
were much larger the GPU would be the bottleneck and the host figure a lower bound. The
flashgen and SDPA cases alternate round by round, so drift in machine speed hits both
alike; the report gives each case's median and minimum over rounds.

Cases (flashgen = `flashgen.attention`, with impl="flashgen" where the tree has that option, SDPA = `F.scaled_dot_product_attention`, default
backend choice):
  fwd            forward, no gradient wanted (torch.no_grad)
  fwd_grad       forward of inputs that require grad (records the autograd node)
  fwd_bwd        forward + `torch.autograd.grad` of q, k, v (no .grad accumulation)
  bwd            the backward alone: `torch.autograd.grad` of one forward's output, its graph
                 kept (retain_graph), so only the autograd engine and the backward run
  auto_fwd       `fwd` with flashgen's own choice of implementation (no impl=: what a user's
  auto_fwd_bwd   call runs; on a GPU whose defaults name an SDPA backend, that backend), and
                 `fwd_bwd` likewise (trees without the choice run their kernels: as fwd)
and, for flashgen only, the layers under the public call (where the time goes):
  layer_check    `flashgen.kernels.validate.check_inputs` (cached per signature after this change)
  layer_launcher `flashgen.kernels.fwd.forward` (the launcher, no op dispatch)
  layer_op       `torch.ops.flashgen.attention_fwd` (op dispatch + launcher)
  layer_bwd_launcher `flashgen.kernels.bwd.backward` (the backward launcher alone)
  layer_alloc    the launcher's two allocations alone (out like q, float32 lse)
  layer_route    `flashgen.runtime.vendor.sdpa` with the implementation the choice names for
                 the forward (trees that have it, when that is an SDPA backend)

The same script runs on older trees of this repository (it only uses those public names), so
before/after figures come from one script: run it once per tree with `--label`. For that reason
it does not import `flashgen.bench.harness` (which older trees lack), and its timing is its own:
host time per call, not do_bench's GPU time.

Example: python benchmarks/host_time.py --label after --out host_after.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for the method.",
    )
    parser.add_argument("--label", default="tree", help="name of this tree in the report")
    parser.add_argument("--out", default=None, help="JSON file to write (default: stdout only)")
    parser.add_argument("--shape", default="1,1,128,64", help="B,H,S,D of q, k and v")
    parser.add_argument("--causal", action="store_true", help="causal attention")
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per case")
    parser.add_argument("--warmup", type=int, default=50, help="calls before timing")
    parser.add_argument("--commit", default=None, help="commit to record (default: git HEAD)")
    parser.add_argument(
        "--device",
        default="cuda",
        help="cuda (the measurement); cpu only smoke-tests this script (interpreter kernels)",
    )
    return parser.parse_args(argv)


def _git_commit(path: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", path, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def make_cases(shape, causal, dev):
    import torch
    import torch.nn.functional as F

    import flashgen
    from flashgen.kernels import fwd, validate

    b, h, s, d = shape
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    q, k, v = (torch.randn(b, h, s, d, device=dev, dtype=dtype) for _ in range(3))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    do = torch.randn_like(q)
    scale = d**-0.5

    def no_grad(fn):
        def run():
            with torch.no_grad():
                fn(q, k, v)

        return run

    def bwd_only(fn):
        out = fn(qg, kg, vg)
        return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

    def fwd_bwd(fn):
        def run():
            out = fn(qg, kg, vg)
            torch.autograd.grad(out, (qg, kg, vg), do)

        return run

    # Trees with the run-time implementation choice (issue 15) are told to run flashgen's own
    # kernels: their launch path is what is measured, not the SDPA backend they might pick.
    force = (
        {"impl": "flashgen"} if "impl" in inspect.signature(flashgen.attention).parameters else {}
    )
    ours = lambda a, b_, c: flashgen.attention(a, b_, c, causal=causal, **force)  # noqa: E731
    sdpa = lambda a, b_, c: F.scaled_dot_product_attention(a, b_, c, is_causal=causal)  # noqa: E731
    auto = lambda a, b_, c: flashgen.attention(a, b_, c, causal=causal)  # noqa: E731
    pairs = {
        "fwd": (no_grad(ours), no_grad(sdpa)),
        "fwd_grad": (lambda: ours(qg, kg, vg), lambda: sdpa(qg, kg, vg)),
        "fwd_bwd": (fwd_bwd(ours), fwd_bwd(sdpa)),
        "bwd": (bwd_only(ours), bwd_only(sdpa)),
        "auto_fwd": (no_grad(auto), no_grad(sdpa)),
        "auto_fwd_bwd": (fwd_bwd(auto), fwd_bwd(sdpa)),
    }
    layers = {
        "layer_check": lambda: validate.check_inputs(q, k, v, causal=causal, scale=None),
        "layer_launcher": lambda: fwd.forward(q, k, v, causal=causal, scale=scale),
        "layer_bwd_launcher": _bwd_layer(q, k, v, do, causal, scale),
        "layer_op": lambda: torch.ops.flashgen.attention_fwd(q, k, v, causal, scale),
        "layer_alloc": lambda: (
            torch.empty_like(q),
            torch.empty(q.shape[:3], dtype=torch.float32, device=q.device),
        ),
    }
    route = _route_layer(q, k, v, causal, scale)
    if route is not None:
        layers["layer_route"] = route
    # Correctness guard: a fast launch that computed nothing would time well.
    with torch.no_grad():
        err = (ours(q, k, v).float() - sdpa(q, k, v).float()).abs().max().item()
    if not err < 3e-2:
        raise SystemExit(f"flashgen and SDPA disagree on the timed input (max error {err})")
    return pairs, layers


def _bwd_layer(q, k, v, do, causal, scale):
    """`flashgen.kernels.bwd.backward` on one forward's out and lse (no autograd)."""
    from flashgen.kernels import bwd, fwd

    out, lse = fwd.forward(q, k, v, causal=causal, scale=scale)
    return lambda: bwd.backward(do, q, k, v, out, lse, causal=causal, scale=scale)


def _route_layer(q, k, v, causal, scale):
    """The SDPA call of the routed path alone, or None (an older tree, or flashgen chosen)."""
    try:
        from flashgen.runtime import vendor
    except ImportError:
        return None
    if not hasattr(vendor, "winner") or not hasattr(vendor, "sdpa"):
        return None
    impl = vendor.winner(q, k, v, causal, False)
    if impl == "flashgen":
        return None
    import torch

    def run():
        with torch.no_grad():
            vendor.sdpa(q, k, v, causal=causal, scale=scale, impl=impl)

    return run


def time_rounds(fns: dict, calls: int, rounds: int, warmup: int, sync) -> dict:
    """fns: name -> callable; rounds alternate between them. Returns name -> samples (µs)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync()
    samples = {name: {"host": [], "wall": []} for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            sync()
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            issued = time.perf_counter()
            sync()
            done = time.perf_counter()
            samples[name]["host"].append((issued - start) / calls * 1e6)
            samples[name]["wall"].append((done - start) / calls * 1e6)
    return samples


def summarize(samples: dict) -> dict:
    return {
        kind: {
            "median_us": round(statistics.median(values), 2),
            "min_us": round(min(values), 2),
        }
        for kind, values in samples.items()
    }


def _auto_impl(shape, causal, dev):
    """Which implementation the auto cases ran, forward and forward+backward (None: a tree
    without the choice)."""
    try:
        from flashgen.core.spec import KernelSpec
        from flashgen.runtime import dispatch
    except ImportError:
        return None
    if not hasattr(dispatch, "impl_choice"):
        return None
    dtype = "bfloat16" if dev == "cuda" else "float32"
    return {
        direction: list(
            dispatch.impl_choice(
                KernelSpec(shape[3], causal, dtype, direction), shape[2], shape[2], dev == "cuda"
            )
        )
        for direction in ("fwd", "bwd")
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    import triton

    if args.device == "cuda" and not torch.cuda.is_available():
        print("host_time.py needs a CUDA GPU (--device cpu only smoke-tests it)", file=sys.stderr)
        return 2
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    shape = tuple(int(x) for x in args.shape.split(","))
    pairs, layers = make_cases(shape, args.causal, args.device)
    report = {
        "label": args.label,
        "commit": args.commit or _git_commit(os.getcwd()),
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu (smoke test)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "shape": list(shape),
        "dtype": "bfloat16" if args.device == "cuda" else "float32",
        "causal": args.causal,
        "calls": args.calls,
        "rounds": args.rounds,
        "time_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "cases": {},
    }
    for case, (ours, sdpa) in pairs.items():
        samples = time_rounds({"flashgen": ours, "sdpa": sdpa}, args.calls, args.rounds,
                              args.warmup, sync)  # fmt: skip
        result = {name: summarize(s) for name, s in samples.items()}
        ratio = result["flashgen"]["host"]["median_us"] / result["sdpa"]["host"]["median_us"]
        result["host_ratio_flashgen_to_sdpa"] = round(ratio, 3)
        report["cases"][case] = result
    samples = time_rounds(layers, args.calls, args.rounds, args.warmup, sync)
    report["layers"] = {name: summarize(s) for name, s in samples.items()}
    report["auto_impl"] = _auto_impl(shape, args.causal, args.device)

    print(f"[{args.label}] host time per call (median µs over {args.rounds} rounds of "
          f"{args.calls}), shape {shape} {report['dtype']} causal={args.causal}")  # fmt: skip
    for case, result in report["cases"].items():
        ours, theirs = result["flashgen"], result["sdpa"]
        print(f"  {case:<12} flashgen {ours['host']['median_us']:8.2f} (wall "
              f"{ours['wall']['median_us']:.2f})   sdpa {theirs['host']['median_us']:8.2f} (wall "
              f"{theirs['wall']['median_us']:.2f})   ratio {result['host_ratio_flashgen_to_sdpa']}")  # fmt: skip
    for name, result in report["layers"].items():
        print(f"  {name:<15} {result['host']['median_us']:8.2f}")
    print(f"  auto cases ran: {report['auto_impl']}")
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
