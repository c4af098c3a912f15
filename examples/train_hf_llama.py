"""Train a Hugging Face Llama (random weights, no download) eagerly, under Inductor and under flashgen.

    python examples/train_hf_llama.py                       # the H200 figures' setting
    python examples/train_hf_llama.py --shapes 2x4096 --attn eager --json llama.json
    python examples/train_hf_llama.py --smoke               # tiny, CPU interpreter (CI)

The model is `transformers.LlamaForCausalLM` built from a config (default: 8 layers, hidden 2048,
16 query heads and 4 key/value heads of dim 128, intermediate 5632, vocab 32000) in bf16, and
trained with AdamW on random token batches (the loss is the model's own shifted cross-entropy).
The same seeded model and batches are run three ways: eager PyTorch, `torch.compile` with
Inductor, and `torch.compile(backend="flashgen")`, whose pattern pass proves HF's mask causal
and swaps the attention for flashgen's op (which runs flashgen's kernels or the fastest SDPA
backend, whichever its tuning records say; the rest of the graph goes to Inductor).

For each batch shape (BxT: sequences x tokens) it reports tokens/s and peak memory over the
timed steps (after --warmup steps, which include compilation: "first step" shows that cost),
and checks that the loss curves agree: the mean over the steps of |loss - eager's loss| within
--loss-tol (bf16 training drifts apart slowly, and one unstable step can jump apart in every
compiled backend, Inductor's included: the table also shows the largest gap; a wrong attention
is off by far more at every step; `common.compare_losses`). The speed-up column is
flashgen's tokens/s over the best of eager and Inductor. Exit status 1 when a loss curve
disagrees. Results go to --json incrementally.

`--attn` picks HF's attention implementation: `sdpa` (F.scaled_dot_product_attention with the
mask HF builds) or `eager` (HF's hand-written matmul-softmax-matmul). `--compile-scope layers`
compiles each decoder layer instead of the whole model (PyTorch's regional compilation: the
compile time of one layer); HF then builds its mask outside the compiled region, and with the
sdpa implementation and no padding calls SDPA with is_causal instead of a mask tensor, so
Inductor's graph runs SDPA's own default kernel while flashgen's runs the op's choice.
`--checkpointing` turns on HF's gradient checkpointing (non-reentrant): each decoder layer's
activations are recomputed in the backward, and the backend replaces the attention inside each
layer's checkpoint (HF's mask, built once outside the layers, is copied in and proven causal).
It sets `torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint`, which HF's
hub-kernels layer (the `kernels` package) needs for Dynamo to trace a checkpointed layer.
"""

from __future__ import annotations

import common


def parse(argv=None):
    p = common.base_parser(__doc__)
    common.add_gpu_lock(p)
    p.add_argument("--shapes", default="2x4096,1x16384", help="BxT items (default 2x4096,1x16384)")
    p.add_argument("--backends", default="eager,inductor,flashgen")
    p.add_argument("--attn", default="sdpa", choices=("sdpa", "eager"))
    p.add_argument(
        "--compile-scope", default="model", choices=("model", "layers"),
        help="compile the whole model (default) or each decoder layer (regional compilation: "
        "one layer's compile time; HF then builds the mask eagerly and passes is_causal)",
    )  # fmt: skip
    p.add_argument("--checkpointing", action="store_true",
                   help="HF's gradient checkpointing: layers recomputed in the backward")  # fmt: skip
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--steps", type=int, default=6, help="timed steps (default 6)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--loss-tol", type=float, default=0.05,
                   help="the largest mean |loss - eager loss| over the steps (default 0.05)")  # fmt: skip
    p.add_argument(
        "--dtype", default="bfloat16", choices=("bfloat16", "float32"),
        help="model dtype on the GPU (default bfloat16; float32 gives a reference loss curve "
        "that bf16 runs of every backend can be held against; the CPU always runs float32)",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.smoke:
        args.shapes, args.layers, args.hidden, args.heads, args.kv_heads = "2x32", 2, 64, 4, 2
        args.intermediate, args.vocab, args.steps, args.warmup = 128, 128, 1, 1
        args.layers = 1
    args.shapes = common.shape_list(args.shapes)
    args.backends = common.backend_list(args)
    return args


def build(args, device, dtype, max_len):
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, max_position_embeddings=max_len,
        attn_implementation=args.attn,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype).train()
    if args.checkpointing:
        torch._dynamo.config.skip_fwd_side_effects_in_bwd_under_checkpoint = True
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import torch

    dtype = torch.float32 if device == "cpu" else getattr(torch, args.dtype)
    max_len = max(s for _, s in args.shapes)
    rows: list[dict] = []
    extra = {"args": {k: v for k, v in vars(args).items()}}

    def save(row):
        common.write_json(args.json, {"rows": rows + [row], **extra})

    for batch, seq in args.shapes:
        gen = torch.Generator().manual_seed(1)
        batches = [torch.randint(0, args.vocab, (batch, seq), generator=gen).to(device)
                   for _ in range(3)]  # fmt: skip
        rows += common.compare_training(
            lambda: build(args, device, dtype, max_len),
            batches,
            lambda net, ids: net(input_ids=ids, labels=ids).loss,
            backends=args.backends, warmup=args.warmup, steps=args.steps,
            tokens_per_step=batch * seq, device=device, smoke=args.smoke,
            label=f"{batch}x{seq}", loss_tol=args.loss_tol, on_row=save,
            regions=(lambda m: m.model.layers) if args.compile_scope == "layers" else None,
            gpu_lock=args.gpu_lock,
        )  # fmt: skip
    return common.finish(rows, args.json, extra)


if __name__ == "__main__":
    raise SystemExit(main())
