"""Host time of one decoding step's attention call, compiled, flashgen beside Inductor (CUDA).

Why: greedy `generate()` of a small model is host-bound (benchmarks/RESULTS.md, issue 17: about
2.3 ms a token for two layers, while the GPU work is a few hundred µs), so what a compiled
attention call costs the CPU decides tokens/s. The function timed is HF Llama's SDPA attention
as Dynamo sees it during decoding with a static cache (`transformers.integrations.
sdpa_attention`: K/V repeated for GQA, a boolean mask [B, 1, 1, Sk], no is_causal):

    step(q, k, v, mask) = sdpa(q, repeat_kv(k), repeat_kv(v), attn_mask=mask)

compiled by Inductor alone and by the flashgen backend (its pass hands the decode kernels the
un-repeated K/V and the mask), each also with CUDA graphs (Inductor's `triton.cudagraphs`,
`flashgen.backend(cudagraphs=True)`). The layers under flashgen's compiled call are timed too:
the op as Inductor's wrapper calls it (`torch.ops.flashgen.attention_fwd.default`) and the
launcher alone (`flashgen.kernels.decode.decode_forward`).

Method as benchmarks/host_time.py: rounds of `--calls` back-to-back calls without
synchronisation, host time per call = elapsed / calls (and wall time with the GPU drained),
cases alternating round by round; median and minimum over rounds. Every compiled variant is
checked against a float64 reference first. `--profile N`: cProfile of N op calls (top
functions by own time) to say where the flashgen call's host time goes.

    python benchmarks/decode_host.py [--shape 1,16,4,1152,128] [--out decode_host.json]
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import statistics

import torch
import torch.nn.functional as F


def repeat_kv(x, n):
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def make_inputs(shape, dev):
    b, hq, hkv, sk, d = shape
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    gen = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(b, hq, 1, d, device=dev, dtype=dtype, generator=gen)
    k, v = (torch.randn(b, hkv, sk, d, device=dev, dtype=dtype, generator=gen) for _ in range(2))
    mask = torch.zeros(b, 1, 1, sk, dtype=torch.bool, device=dev)
    mask[..., : sk - sk // 8] = True  # a static cache's filled slots; the rest are empty
    return q, k, v, mask


def reference(q, k, v, mask):
    n = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.double() for t in (q, repeat_kv(k, n), repeat_kv(v, n)))
    return F.scaled_dot_product_attention(q64, k64, v64, attn_mask=mask)


def compiled_variants(group):
    from torch._inductor.compile_fx import compile_fx

    import flashgen

    def step(q, k, v, mask):
        return F.scaled_dot_product_attention(
            q, repeat_kv(k, group), repeat_kv(v, group), attn_mask=mask
        )

    def inductor_cg(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": True})

    backends = {
        "inductor": "inductor",
        "flashgen": flashgen.backend(),
        "inductor_cg": inductor_cg,
        "flashgen_cg": flashgen.backend(cudagraphs=True),
    }
    return {name: torch.compile(step, backend=b, dynamic=False) for name, b in backends.items()}


def time_rounds(fns, calls, rounds, warmup, sync):
    """{name: {"host"|"wall": (median, min) µs per call}} over interleaved rounds: the sampling
    of benchmarks/host_time.py (imported from beside this script), summarised."""
    from host_time import time_rounds as samples_of

    samples = samples_of(fns, calls, rounds, warmup, sync)
    return {
        name: {kind: (round(statistics.median(v), 2), round(min(v), 2)) for kind, v in s.items()}
        for name, s in samples.items()
    }


def _gpu_times(q, k, v, mask, scale, ref, sdpa_eager, report, args, sync):
    """GPU time (do_bench median, 3 series) of the launcher with its default config, with one
    split (no merge kernel: two allocations and one launch less), and of eager SDPA; then the
    two launchers' host times."""
    from flashgen.bench import scripts
    from flashgen.hardware import decode as hw
    from flashgen.kernels import decode

    one = hw.DecodeConfig(64, 4, 3, 1)
    fns = {
        "launcher_default": lambda: decode.decode_forward(
            q, k, v, causal_offset=None, scale=scale, mask=mask
        ),
        "launcher_one_split": lambda: decode.decode_forward(
            q, k, v, causal_offset=None, scale=scale, mask=mask, config=one
        ),
    }
    err = (fns["launcher_one_split"]()[0].double() - ref).abs().max().item()
    print(f"check launcher_one_split: max abs error vs float64 {err:.2e}", flush=True)
    timed = {**fns, "sdpa_eager": sdpa_eager}
    timer = scripts.timer("cuda", 100, warmup_ms=25)
    report["gpu_us"] = {n: [round(timer(f) * 1e3, 2) for _ in range(3)] for n, f in timed.items()}
    print("GPU µs (do_bench median, 3 series):", report["gpu_us"], flush=True)
    host = time_rounds(fns, args.calls, args.rounds, args.warmup, sync)
    report["host_us"].update({f"{n}_2": t for n, t in host.items()})
    for name, t in host.items():
        print(
            f"  host {name:<20} {t['host'][0]:8.2f} {t['host'][1]:8.2f}   wall {t['wall'][0]:8.2f}"
        )


def main(argv=None):
    from flashgen.bench.scripts import parser

    p = parser(__doc__)
    p.add_argument("--shape", default="1,16,4,1152,128", help="B,Hq,Hkv,Sk,D")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--profile", type=int, default=2000, help="op calls under cProfile (0: none)")
    p.add_argument("--variants", default="inductor,flashgen,inductor_cg,flashgen_cg")
    p.add_argument("--out", default=None)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the script")
    args = p.parse_args(argv)
    from flashgen.kernels import decode

    dev = args.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    shape = tuple(int(x) for x in args.shape.split(","))
    q, k, v, mask = make_inputs(shape, dev)
    group = shape[1] // shape[2]
    scale = shape[4] ** -0.5
    ref = reference(q, k, v, mask)
    fns, report = {}, {"shape": list(shape), "checks": {}}
    variants = compiled_variants(group)
    variants = {n: variants[n] for n in args.variants.split(",")}
    if dev != "cuda":
        variants = {n: f for n, f in variants.items() if not n.endswith("_cg")}
    with torch.no_grad():
        for name, fn in variants.items():
            for _ in range(3):  # CUDA-graph variants: warm-up, record, replay
                out = fn(q, k, v, mask)
            err = (out.double() - ref).abs().max().item()
            report["checks"][name] = err
            print(f"check {name}: max abs error vs float64 {err:.2e}", flush=True)
            if not err < 2e-2:
                raise SystemExit(f"{name} is wrong (max error {err})")
            fns[name] = lambda fn=fn: fn(q, k, v, mask)
        op = torch.ops.flashgen.attention_fwd.default
        fns["layer_op"] = lambda: op(q, k, v, False, scale, None, None, "top_left", None, mask)
        fns["layer_launcher"] = lambda: decode.decode_forward(
            q, k, v, causal_offset=None, scale=scale, mask=mask
        )
        kr, vr = repeat_kv(k, group), repeat_kv(v, group)
        fns["layer_sdpa_eager"] = lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask)
        times = time_rounds(fns, args.calls, args.rounds, args.warmup, sync)
        report["host_us"] = times
        print(f"host µs per call (median, min over {args.rounds} rounds of {args.calls}); wall:")
        for name, t in times.items():
            print(
                f"  {name:<17} {t['host'][0]:8.2f} {t['host'][1]:8.2f}   wall {t['wall'][0]:8.2f}"
            )
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.profile):
                fns["layer_op"]()
            prof.disable()
            sync()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
            report["profile"] = buf.getvalue()
            print(buf.getvalue())
        if dev == "cuda":  # GPU time of the launcher's default config and of one split
            _gpu_times(q, k, v, mask, scale, ref, fns["layer_sdpa_eager"], report, args, sync)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
