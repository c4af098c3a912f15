"""Session 36 B5 (issue 15): where the op's forward loses its kernel's lead.

B4's grid read the op's forward (no grad) level with cuDNN (0.997-1.002x) at shapes whose records
name flashgen's forward and where the kernel alone leads cuDNN by 3-9% (B1's recompare; mix_bwd's
`ours_fwd`). This times, alternating rounds, at three such shapes: `plain_forward` (the kernel's
launch path without the op), `flashgen.attention` under no_grad (the op: its choice), the op
forced to flashgen (impl="flashgen"), and cuDNN's forward. Then 200 back-to-back calls of each
between two CUDA events with no L2 flush (steady-state GPU time a call), and the CUDA runtime
calls the op makes (torch.profiler) to find a synchronising one.
    python op_gap.py [--rounds 9]
"""

import argparse
import json
import os
import statistics
import sys

sys.path.append(os.getcwd())
sys.path.append(os.path.join(os.getcwd(), "benchmarks"))

import torch  # noqa: E402

import flashgen  # noqa: E402
from flashgen.bench import harness, scripts  # noqa: E402
from flashgen.runtime.primitives import plain_forward  # noqa: E402

SHAPES = [
    (16, 16, 16, 1024, 128, False),
    (4, 32, 32, 4096, 64, True),
    (16, 32, 32, 1024, 64, False),
]


def calls(q, k, v, causal, scale):
    return {
        "plain": lambda: plain_forward(q, k, v, causal, scale, keep_lse=False),
        "op": lambda: flashgen.attention(q, k, v, causal=causal, scale=scale),
        "op_flashgen": lambda: flashgen.attention(
            q, k, v, causal=causal, scale=scale, impl="flashgen"
        ),
        "cudnn": lambda: harness.sdpa("sdpa_cudnn", q, k, v, causal=causal, scale=scale),
    }


def loop_ms(fn, n=200):
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    out = {}
    time_fn = scripts.timer("cuda", 30)
    for shape in SHAPES:
        b, hq, hkv, n, d, causal = shape
        scale = d**-0.5
        q, k, v = scripts.inputs(b, hq, hkv, n, n, d, seed=0, count=3)
        fns = calls(q, k, v, causal, scale)
        with torch.no_grad():
            ref = fns["cudnn"]()
            for name, fn in fns.items():
                got = fn()
                got = got[0] if isinstance(got, tuple) else got  # plain_forward: (out, lse)
                err = (got.float() - ref.float()).abs().max().item()
                print(shape, name, "max abs diff vs cuDNN", f"{err:.2e}", flush=True)
            ms = {name: [] for name in fns}
            loops = {name: [] for name in fns}
            for r in range(args.rounds):
                order = list(fns) if r % 2 == 0 else list(reversed(fns))
                for name in order:
                    ms[name].append(time_fn(fns[name]))
                for name in order:
                    loops[name].append(loop_ms(fns[name]))
            med = {k_: round(statistics.median(v_), 4) for k_, v_ in ms.items()}
            lmed = {k_: round(statistics.median(v_), 4) for k_, v_ in loops.items()}
            print(shape, "do_bench", json.dumps(med), "back-to-back", json.dumps(lmed), flush=True)
            prof_rows = {}
            for name in ("op", "plain"):
                with torch.profiler.profile(
                    activities=[
                        torch.profiler.ProfilerActivity.CPU,
                        torch.profiler.ProfilerActivity.CUDA,
                    ]
                ) as prof:
                    for _ in range(20):
                        fns[name]()
                    torch.cuda.synchronize()
                rows = []
                for e in prof.key_averages():
                    if (
                        e.key.startswith("cuda")
                        or e.key.startswith("cu")
                        or e.device_type == torch.autograd.DeviceType.CUDA
                    ):
                        rows.append((e.key, e.count))
                prof_rows[name] = rows
                print(shape, name, "profiled (20 calls):", rows, flush=True)
        out[str(shape)] = {
            "do_bench": med,
            "loop": lmed,
            "readings": ms,
            "loops": loops,
            "profile": prof_rows,
        }
    dst = os.path.join(os.environ.get("OUT", "."), "op_gap.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
