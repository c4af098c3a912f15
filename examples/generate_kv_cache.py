"""Generate text with a KV cache: HF Llama `generate()` eagerly, under Inductor and under flashgen.

    python examples/generate_kv_cache.py                     # 4k-token prompt, 128 new tokens
    python examples/generate_kv_cache.py --prompt 16384 --new 64 --json gen.json
    python examples/generate_kv_cache.py --smoke             # tiny, CPU interpreter (CI)

A random-weight `transformers.LlamaForCausalLM` (no download; default 8 layers, hidden 2048,
GQA 16/4, head dim 128, bf16) generates greedily with HF's default dynamic KV cache (the keys grow by one
each step; a compiled forward is compiled for the prefill, the first step and once more with a
dynamic length, not once per token). Its forward is run eagerly, compiled with Inductor, and compiled with
`flashgen.backend()`. Two things are measured per backend, after a warm-up generation that
compiles: the prefill (the prompt's forward: `max_new_tokens=1`, time to first token) and the
decoding rate (`--new` tokens; tokens/s = (new - 1) x batch over the time beyond the prefill).
In the prefill the query is the whole prompt (flashgen's forward kernels or the SDPA backend
its records choose); a decoding step's query is one token against the cache, whose mask the
backend proves causal with bottom-right alignment (flashgen's split-KV decode kernels). Today
the graph Dynamo recompiles with a dynamic key length for the later steps is left to Inductor
(the pass reports "k and v have different sequence lengths": their lengths get separate
symbols), so only the prefill and the first step run flashgen's kernels; "sites replaced"
counts them, and the log (`flashgen` logger, INFO) names the skipped one. The generated tokens
are compared with eager's: identical in float32; in bf16 greedy decoding may part ways after a
near tie, so the share of matching tokens is shown.
"""

from __future__ import annotations

import time

import common


def parse(argv=None):
    p = common.base_parser(__doc__)
    p.add_argument("--prompt", type=int, default=4096, help="prompt tokens (default 4096)")
    p.add_argument("--new", type=int, default=128, help="tokens to generate (default 128)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--backends", default="eager,inductor,flashgen")
    args = p.parse_args(argv)
    if args.smoke:
        args.prompt, args.new, args.layers, args.hidden, args.heads = 12, 4, 1, 64, 4
        args.kv_heads, args.intermediate, args.vocab = 2, 64, 64
    args.backends = common.backend_list(args)
    return args


def build(args, device, dtype):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=args.prompt + args.new,
        attn_implementation="sdpa",
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    model.generation_config.disable_compile = True  # the backend under test, not generate()'s
    return model


def timed_generate(model, ids, new, device):
    """(tokens, seconds) of one greedy generation of `new` tokens."""
    import torch

    kw = {"do_sample": False, "pad_token_id": 0}
    common.sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw)
    common.sync(device)
    return out, time.perf_counter() - start


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import torch

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    gen = torch.Generator().manual_seed(1)
    # No token 0 (the pad token): generate() would infer padding and pass a mask tensor.
    ids = torch.randint(1, args.vocab, (args.batch, args.prompt), generator=gen).to(device)
    rows, eager_tokens = [], None
    for backend in args.backends:
        common.reset(device)
        model = build(args, device, dtype)
        if backend != "eager":
            model.forward = common.compiled(model.forward, backend, smoke=args.smoke)
        before = common.replaced_sites()
        timed_generate(model, ids, args.new, device)  # compiles prefill and decoding graphs
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        _, prefill_s = timed_generate(model, ids, 1, device)
        tokens, total_s = timed_generate(model, ids, args.new, device)
        new = tokens[:, args.prompt :]
        row = {
            "case": f"{args.batch}x{args.prompt}+{args.new}",
            "backend": backend,
            "prefill_ms": prefill_s * 1e3,
            "prefill_tokens_per_s": args.batch * args.prompt / prefill_s,
            "decode_tokens_per_s": (args.new - 1) * args.batch / (total_s - prefill_s)
            if total_s > prefill_s and args.new > 1
            else None,
            "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        }
        if backend == "flashgen":
            row["replaced"] = common.replaced_sites() - before
        if eager_tokens is None and backend == "eager":
            eager_tokens = new
        if eager_tokens is not None:
            row["same_tokens"] = (new == eager_tokens).float().mean().item()
        rows.append(row)
        common.write_json(args.json, {"rows": rows, "args": vars(args)})
        del model
    columns = [
        ("case", "case", "s"), ("backend", "backend", "s"), ("prefill_ms", "prefill ms", ".1f"),
        ("decode_tokens_per_s", "decode tok/s", ".0f"), ("peak_mem_gb", "peak GB", ".1f"),
        ("same_tokens", "same as eager", ".2f"), ("replaced", "sites replaced", "d"),
    ]  # fmt: skip
    print(common.report(rows, columns))
    common.write_json(args.json, {"rows": rows, "args": vars(args)})
    exact = dtype == torch.float32
    bad = [r for r in rows if exact and r.get("same_tokens", 1.0) < 1.0]
    bad += [r for r in rows if r["backend"] == "flashgen" and not r.get("replaced")]
    for r in bad:
        print(f"{r['backend']}: tokens differ from eager or no attention site replaced")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
