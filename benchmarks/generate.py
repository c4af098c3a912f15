"""Greedy `generate()` of a Llama-style model (random weights, no download) on the GPU: tokens/s
with the forward compiled by the flashgen backend against Inductor alone, and eager.

    python benchmarks/generate.py [--cache static|dynamic] [--layers 4] [--new 128] [--out F.csv]
        [--variants eager,flashgen,inductor,flashgen-cg,inductor-cg] [--budget SECONDS]

bf16, batch 1 (and --batch), a prompt of --prompt tokens, --new tokens greedily. Each compiled
variant runs generate() once untimed (compiling; a "-cg" variant twice), then --reps timed runs
(torch.cuda.synchronize around each; the median is reported); eager runs once untimed (its tokens are the reference),
then --reps timed runs. Variants ending in "-cg" run each compiled graph as a CUDA graph
(`_backend`). The tokens of every variant are compared with eager's, and the graphs each
compiled variant compiled are counted (prefill and decoding step: more means recompiles).
The flashgen backend's log line per graph says which attention sites it replaced and why the
others were left to Inductor. The backend is passed as an object (`flashgen.backend()`), so the
script needs no installed entry point (a copied tree on PYTHONPATH works).
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import statistics
import time

import torch


def build(args):
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=args.hidden, intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=4096,
        attn_implementation=args.attn,
    )  # fmt: skip
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    return transformers.LlamaForCausalLM(cfg).eval().to(args.device, dtype)


def _sync(args):
    if args.device == "cuda":
        torch.cuda.synchronize()


def run(model, ids, args):
    kw = {"max_new_tokens": args.new, "min_new_tokens": args.new, "do_sample": False,
          "pad_token_id": 0}  # fmt: skip
    if args.cache == "static":
        kw["cache_implementation"] = "static"
    with torch.no_grad():
        _sync(args)
        t = time.perf_counter()
        out = model.generate(ids, **kw)
        _sync(args)
    return out, time.perf_counter() - t


def _counting(backend, graphs: list):
    """`backend` (a name or a callable) wrapped to count the graphs it compiles."""
    from torch._dynamo.backends.registry import lookup_backend

    inner = lookup_backend(backend) if isinstance(backend, str) else backend

    def compile_graph(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return inner(gm, example_inputs)

    return compile_graph


def _backend(variant: str):
    """The backend of a compiled variant. "-cg": each graph run as a CUDA graph (Inductor's
    `triton.cudagraphs`, what mode="reduce-overhead" sets; the flashgen backend's
    `cudagraphs=True`), so a decoding step's host time is one graph replay."""
    from torch._inductor.compile_fx import compile_fx

    import flashgen

    def inductor_cg(gm, example_inputs):
        return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": True})

    return {
        "flashgen": flashgen.backend(),
        "inductor": "inductor",
        "flashgen-cg": flashgen.backend(cudagraphs=True),
        "inductor-cg": inductor_cg,
    }[variant]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", choices=["static", "dynamic"], default="static")
    p.add_argument("--attn", choices=["sdpa", "eager"], default="sdpa")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--variants", default="eager,flashgen,inductor")
    p.add_argument("--budget", type=float, default=1e9, help="skip variants after this many s")
    p.add_argument("--out", default="generate.csv")
    p.add_argument("--device", default="cuda", help="cpu: a smoke test (float32)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("flashgen").setLevel(logging.INFO)
    model = build(args)
    gen = torch.Generator(device=args.device).manual_seed(1)
    ids = torch.randint(0, 32000, (args.batch, args.prompt), device=args.device, generator=gen)
    end = time.perf_counter() + args.budget
    eager, _ = run(model, ids, args)
    model.generation_config.disable_compile = True  # our compile, not generate()'s own
    plain_forward = model.forward
    rows = []
    first = None
    for variant in args.variants.split(","):
        if time.perf_counter() > end:
            print(f"{variant}: skipped (budget spent)", flush=True)
            continue
        torch._dynamo.reset()
        graphs: list[int] = []
        t0 = time.perf_counter()
        if variant == "eager":
            model.forward = plain_forward
            out, _ = run(model, ids, args)
        else:
            model.forward = torch.compile(
                plain_forward, backend=_counting(_backend(variant), graphs)
            )
            # The first run compiles; a CUDA-graph variant records its graphs in the second.
            for _ in range(2 if variant.endswith("-cg") else 1):
                out, _ = run(model, ids, args)
        warm = time.perf_counter() - t0
        times = [run(model, ids, args)[1] for _ in range(args.reps)]
        med = statistics.median(times)
        same = (out == eager).float().mean().item()
        diff = (out != eager).any(0).nonzero()
        first_diff = int(diff[0]) - args.prompt if len(diff) else -1
        # Against the first variant run: compiled variants that drift from eager at a bf16
        # near-tie (eager does not repeat itself either) may still agree with each other.
        first = first or (variant, out)
        same_first = (out == first[1]).float().mean().item()
        tps = args.batch * args.new / med
        rows.append({"variant": variant, "tokens_per_s": round(tps, 1), "median_s": round(med, 4),
                     "same_as_eager": round(same, 4), "first_diff": first_diff,
                     "same_as_first": round(same_first, 4), "first_variant": first[0],
                     "warmup_s": round(warm, 1),
                     "graphs": len(graphs),
                     "cache": args.cache, "attn": args.attn, "layers": args.layers,
                     "hidden": args.hidden, "heads": f"{args.heads}/{args.kv_heads}",
                     "batch": args.batch, "prompt": args.prompt, "new": args.new,
                     "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
                     "commit": os.environ.get("FLASHGEN_COMMIT", "?")})  # fmt: skip
        _append(args.out, rows[-1])  # row by row: a run cut off by a time limit keeps its rows
        print(f"{variant}: {tps:.1f} tokens/s (median of {args.reps}: {med * 1e3:.1f} ms for "
              f"{args.new} tokens), same tokens as eager: {same:.3f} (first difference at new "
              f"token {first_diff}), same as {first[0]}: {same_first:.3f}, warm-up {warm:.1f} s, "
              f"graphs {len(graphs)}", flush=True)  # fmt: skip
    by = {r["variant"]: r["tokens_per_s"] for r in rows}
    for suffix in ("", "-cg"):
        ours, theirs = by.get("flashgen" + suffix), by.get("inductor" + suffix)
        if ours and theirs:
            print(f"ratio flashgen{suffix}/inductor{suffix}: {ours / theirs:.3f}", flush=True)


def _append(path: str, row: dict) -> None:
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, list(row))
        if new:
            w.writeheader()
        w.writerow(row)


if __name__ == "__main__":
    main()
