"""Two source trees on one GPU, side by side: correctness against float64 and speed of the
forward (portable and Hopper families) and of forward+backward, next to SDPA's cuDNN backend.

    python3 benchmarks/ab_trees.py BEFORE_TREE AFTER_TREE [--reps 3] [--out FILE.json] [--budget S]
        [--head-dims 64,128] [--seq 4096] [--fixed-configs] [--device cuda]

(--budget: start no further repetition after S seconds; --head-dims and --seq: which of
`SHAPES` run, at which length; --device cpu with TRITON_INTERPRET=1 runs the plumbing on the
CPU, the Hopper and cuDNN cases then report their errors.)

Why two processes: both trees are packages named `flashgen`, which one interpreter cannot import
twice. One worker per tree (PYTHONPATH=tree) stays alive with its kernels compiled; this parent
sends one case at a time to one worker, alternating the order each repetition, so clock and
thermal drift hit both trees alike and no two measurements overlap. Each time is the median of
`triton.testing.do_bench`; the reported figure is the median over repetitions.

Correctness (each tree, before timing; both workers at once, which also compiles every kernel
the timing runs): bf16 output (portable and Hopper) and dQ/dK/dV at B=1, the timed heads
and length, causal both, head dim 64/128, against flashgen.kernels.reference in float64, with
SDPA's own bf16 error as the scale; a tree passes within 3x SDPA's error plus 1e-3.
Configs come from each tree's own dispatch (the shipped records, else its defaults), or, with
--fixed-configs, from `FIXED` in both trees: the same tiles, the split backward (the only kind
older trees have) and the Hopper forward's non-persistent head-dim-128 config, so a difference
between the trees is one of the generated kernels, not of the records or the defaults.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = [  # (B, H, N, D, causal)
    (4, 32, 4096, 64, False),
    (4, 32, 4096, 64, True),
    (4, 16, 4096, 128, False),
    (4, 16, 4096, 128, True),
]
CASES = ("fwd_portable", "fwd_hopper", "fwdbwd")
SDPA_CASES = ("sdpa_fwd", "sdpa_fwdbwd")
# --fixed-configs: (block_m, block_n, warps, stages) per (mode, causal), the shipped H200
# records' choices for hd128 bf16 at 4k (tuning_db/nvidia-h200.json); the Hopper forward's
# (block_m, block_n, num_buf, consumers, num_warps, maxnreg, pingpong).
FIXED = {
    ("fwd", False): (128, 64, 4, 2),
    ("fwd", True): (64, 64, 4, 3),
    ("bwd", False): (64, 64, 4, 2),
    ("bwd", True): (64, 64, 4, 2),
}
FIXED_HOPPER = (128, 128, 2, 2, 4, 168, False)


def worker() -> None:
    """Read one JSON command per line on stdin, answer one JSON line on stdout."""
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashgen.core.config import TileConfig
    from flashgen.core.spec import KernelSpec, dtype_name
    from flashgen.kernels import bwd, fwd, hopper, reference

    try:  # where the class lives differs between trees
        from flashgen.core.hopper_config import HopperConfig
    except ImportError:
        HopperConfig = hopper.HopperConfig  # noqa: N806

    device = os.environ.get("AB_DEVICE", "cuda")
    fixed = os.environ.get("AB_FIXED") == "1"
    if fixed:  # trees that know the kind take the split one, as older trees always do
        os.environ["FLASHGEN_BWD_KIND"] = "split"
    inputs = {}

    def configs(causal):
        """(fwd config, bwd config, Hopper config); None each: the tree's own choice."""
        if not fixed:
            return None, None, None
        fwd_cfg, bwd_cfg = (TileConfig(*FIXED[mode, causal]) for mode in ("fwd", "bwd"))
        return fwd_cfg, bwd_cfg, HopperConfig(*FIXED_HOPPER)

    def make(b, h, n, d, requires_grad=False, seed=0):
        gen = torch.Generator(device=device).manual_seed(seed)
        return [
            torch.randn(
                b, h, n, d, device=device, dtype=torch.bfloat16, generator=gen
            ).requires_grad_(requires_grad)
            for _ in range(4)
        ]

    def meta():
        props = torch.cuda.get_device_properties(0) if device == "cuda" else None
        return {
            "flashgen": os.path.dirname(os.path.dirname(fwd.__file__)),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "gpu": props.name if props else device,
            "fixed_configs": fixed,
        }

    def run_case(case, b, h, n, d, causal):
        key = (b, h, n, d)
        if key not in inputs:
            inputs[key] = make(b, h, n, d)
        q, k, v, do = inputs[key]
        scale = d**-0.5
        spec = KernelSpec(d, causal, dtype_name(q.dtype))
        fwd_cfg, bwd_cfg, hop_cfg = configs(causal)
        if case == "fwd_portable":
            os.environ["FLASHGEN_FWD_FAMILY"] = "portable"
            return lambda: fwd.forward(q, k, v, causal=causal, scale=scale, config=fwd_cfg)
        if case == "fwd_hopper":
            out = torch.empty_like(q)
            lse = torch.empty(b, h, n, device=device, dtype=torch.float32)
            return lambda: hopper.forward(q, k, v, out, lse, scale=scale, spec=spec, config=hop_cfg)
        if case == "fwdbwd":
            os.environ["FLASHGEN_FWD_FAMILY"] = "portable"

            def step():
                out, lse = fwd.forward(q, k, v, causal=causal, scale=scale, config=fwd_cfg)
                bwd.backward(do, q, k, v, out, lse, causal=causal, scale=scale, config=bwd_cfg)

            return step
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        if case == "sdpa_fwd":

            def sdpa():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            return sdpa

        def sdpa_fb():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
            torch.autograd.backward(out, do)

        return sdpa_fb

    def check(d, causal, n, h):
        # The timed length and heads: the configs and the integer specialisation the timing
        # runs, so this compiles exactly what is timed (both trees at once).
        b = 1
        q, k, v, do = make(b, h, n, d, seed=1)
        scale = d**-0.5
        fwd_cfg, bwd_cfg, hop_cfg = configs(causal)
        q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
        ref, _ = reference.attention_ref(q64, k64, v64, causal=causal, scale=scale)
        ref_grads = torch.autograd.grad(ref, (q64, k64, v64), do.double())
        os.environ["FLASHGEN_FWD_FAMILY"] = "portable"
        out, lse = fwd.forward(q, k, v, causal=causal, scale=scale, config=fwd_cfg)
        grads = bwd.backward(do, q, k, v, out, lse, causal=causal, scale=scale, config=bwd_cfg)
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        try:  # SDPA's own bf16 error is the scale; cuDNN may refuse a ragged length
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                s_out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        except RuntimeError:
            with sdpa_kernel(
                [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
            ):
                s_out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
        s_grads = torch.autograd.grad(s_out, (qg, kg, vg), do)
        result = {}
        pairs = [("out", out, s_out, ref)] + [
            (name, g, sg, rg)
            for name, g, sg, rg in zip(("dq", "dk", "dv"), grads, s_grads, ref_grads, strict=True)
        ]
        if d in hopper.RENDERABLE_HEAD_DIMS and device == "cuda":
            h_out = torch.empty_like(q)
            h_lse = torch.empty(b, h, n, device=device, dtype=torch.float32)
            h_spec = KernelSpec(d, causal, "bfloat16")
            hopper.forward(q, k, v, h_out, h_lse, scale=scale, spec=h_spec, config=hop_cfg)
            pairs.append(("out_hopper", h_out, s_out, ref))
        ok = True
        for name, mine, theirs, want in pairs:
            err = (mine.double() - want).abs().max().item()
            bound = 3 * (theirs.double() - want).abs().max().item() + 1e-3
            result[name] = {"err": err, "sdpa_err": (theirs.double() - want).abs().max().item()}
            ok &= err <= bound
        result["ok"] = ok
        return result

    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "check":
                reply = check(cmd["d"], cmd["causal"], cmd["n"], cmd.get("h", 2))
            elif cmd["op"] == "meta":
                reply = meta()
            else:
                fn = run_case(cmd["case"], *cmd["shape"])
                ms = triton.testing.do_bench(
                    fn, warmup=25, rep=cmd.get("rep", 50), return_mode="median"
                )
                reply = {"ms": ms}
        except Exception as exc:  # a failing case is reported, never the whole run
            reply = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        print(json.dumps(reply), flush=True)


def flops(b, h, n, d, causal, case) -> float:
    f = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
    return f * (3.5 if "fwdbwd" in case else 1.0)


def main() -> int:
    args = sys.argv[1:]
    reps = int(args[args.index("--reps") + 1]) if "--reps" in args else 3
    out_path = args[args.index("--out") + 1] if "--out" in args else None
    budget = float(args[args.index("--budget") + 1]) if "--budget" in args else 1e9
    dims = (
        [int(x) for x in args[args.index("--head-dims") + 1].split(",")]
        if "--head-dims" in args
        else [64, 128]
    )
    seq = int(args[args.index("--seq") + 1]) if "--seq" in args else 4096
    shapes = [(b, h, seq, d, c) for b, h, _, d, c in SHAPES if d in dims]
    trees = {"before": os.path.abspath(args[0]), "after": os.path.abspath(args[1])}
    workers = {}
    for name, tree in trees.items():
        env = dict(
            os.environ,
            PYTHONPATH=tree + os.pathsep + os.environ.get("PYTHONPATH", ""),
            FLASHGEN_CACHE_DIR=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fg-ab-{name}"),
            AB_DEVICE=args[args.index("--device") + 1] if "--device" in args else "cuda",
            AB_FIXED="1" if "--fixed-configs" in args else "0",
        )
        workers[name] = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(name, cmd):
        workers[name].stdin.write(json.dumps(cmd) + "\n")
        workers[name].stdin.flush()

    def receive(name):
        while True:  # skip anything else a library printed to the worker's stdout
            line = workers[name].stdout.readline()
            if not line:
                return {"error": "worker exited"}
            if line.startswith("{"):
                return json.loads(line)
            print(f"[{name}] {line.rstrip()}", flush=True)

    def ask(name, cmd):
        send(name, cmd)
        return receive(name)

    report = {"trees": trees, "shapes": shapes, "meta": {}, "check": {}, "times": {}}
    for name in trees:
        report["meta"][name] = ask(name, {"op": "meta"})
        print(f"{name}: {json.dumps(report['meta'][name])}", flush=True)
    failed = False
    t0 = time.time()
    for d in dims:
        for causal in (False, True):
            for name in trees:  # both workers compile and check at once
                heads = next(s[1] for s in shapes if s[3] == d)
                send(name, {"op": "check", "d": d, "causal": causal, "n": seq, "h": heads})
            for name in trees:
                r = receive(name)
                report["check"][f"{name} d{d} causal={causal}"] = r
                failed |= not r.get("ok", False)
                print(
                    f"check {name:6s} d{d} causal={causal!s:5s}",
                    json.dumps(r, default=str)[:300],
                    flush=True,
                )
    print(f"checks done in {time.time() - t0:.0f} s", flush=True)
    times = {}
    for rep in range(reps):
        if rep and time.time() - t0 > budget:
            print(f"stopping after {rep} repetitions ({budget} s budget)", flush=True)
            break
        order = list(trees) if rep % 2 == 0 else list(trees)[::-1]
        for shape in shapes:
            for case in CASES:
                for name in order:
                    r = ask(name, {"op": "time", "case": case, "shape": shape})
                    times.setdefault((name, case, tuple(shape)), []).append(
                        r.get("ms", r.get("error"))
                    )
            for case in SDPA_CASES:
                r = ask(order[0], {"op": "time", "case": case, "shape": shape})
                times.setdefault(("sdpa", case, tuple(shape)), []).append(
                    r.get("ms", r.get("error"))
                )
            report["times"] = {f"{a}|{b}|{c}": v for (a, b, c), v in times.items()}
            if out_path:  # after every shape: a killed run keeps what it measured
                with open(out_path, "w") as handle:
                    json.dump(report, handle, indent=1)
            last = {key[:2]: v[-1] for key, v in times.items() if key[2] == tuple(shape)}
            print(
                f"rep {rep} {shape}: "
                + ", ".join(
                    f"{n}/{c} {ms:.3f}" for (n, c), ms in last.items() if isinstance(ms, float)
                ),
                flush=True,
            )
        print(f"rep {rep} done at {time.time() - t0:.0f} s", flush=True)

    def med(key):
        vals = [x for x in times.get(key, []) if isinstance(x, float)]
        return statistics.median(vals) if vals else None

    print(
        "shape (B,H,N,D,causal)      case          before ms  after ms  after/before  TFLOP/s(after)  cuDNN ms"
    )
    for shape in shapes:
        for case in CASES:
            b_ms, a_ms = med(("before", case, tuple(shape))), med(("after", case, tuple(shape)))
            ref = "sdpa_fwdbwd" if case == "fwdbwd" else "sdpa_fwd"
            s_ms = med(("sdpa", ref, tuple(shape)))
            if b_ms is None or a_ms is None:
                print(
                    shape,
                    case,
                    "error:",
                    str(times.get(("before", case, tuple(shape))))[:160],
                    str(times.get(("after", case, tuple(shape))))[:160],
                )
                continue
            tf = flops(*shape, case) / a_ms / 1e9
            print(
                f"{str(shape):27s} {case:13s} {b_ms:9.3f} {a_ms:9.3f} {a_ms / b_ms:12.3f} "
                f"{tf:14.0f} {s_ms if s_ms is None else round(s_ms, 3)!s:>9}"
            )
    for w in workers.values():
        w.stdin.close()
        w.wait(timeout=30)
    return 1 if failed else 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker()
    else:
        sys.exit(main())
