"""Train a nanoGPT-style GPT whose attention is written by hand, eagerly, under Inductor and flashgen.

    python examples/train_nanogpt.py                        # GPT-2 small shape, 1k context
    python examples/train_nanogpt.py --layers 6 --block-size 4096 --batch 4 --json gpt.json
    python examples/train_nanogpt.py --smoke                # tiny, CPU interpreter (CI)

The attention is nanoGPT's manual path: a `tril` buffer, `masked_fill(-inf)`, softmax, dropout,
`att @ v`; no SDPA call. `flashgen.explain` first prints what the backend finds in one block
(the mask proven causal for every length, the subgraph replaced by flashgen's op); then the same
seeded model is trained on the same batches eagerly, with `torch.compile` (Inductor) and with
`torch.compile(backend="flashgen")`, reporting tokens/s, peak memory over the timed steps and
whether the loss curves agree with eager's (--loss-tol). The data is a learnable synthetic stream
(each sequence counts up from a random start, modulo the vocabulary), so the loss falls and the
curves compare something. Dropout is 0, as nanoGPT's default, so each backend's loss curve can be
compared with eager's step by step (with attention dropout flashgen's kernels draw their own
masks: `examples/nanogpt.py`).
"""

from __future__ import annotations

import common


def parse(argv=None):
    p = common.base_parser(__doc__)
    common.add_gpu_lock(p)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768, help="n_embd (head dim = width / heads)")
    p.add_argument("--block-size", type=int, default=1024, help="context length (default 1024)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--backends", default="eager,inductor,flashgen")
    p.add_argument(
        "--compile-scope", default="model", choices=("model", "layers"),
        help="compile the whole model (default) or each block (regional compilation)",
    )  # fmt: skip
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--loss-tol", type=float, default=0.05,
                   help="the largest mean |loss - eager loss| over the steps (default 0.05)")  # fmt: skip
    args = p.parse_args(argv)
    if args.smoke:
        args.layers, args.heads, args.width, args.block_size, args.batch = 1, 2, 32, 24, 2
        args.vocab, args.steps, args.warmup = 64, 1, 1
    args.backends = common.backend_list(args)
    return args


def gpt(args):
    """nanoGPT's model at the flags' sizes (examples/nanogpt.py)."""
    import nanogpt

    return nanogpt.GPT(args.vocab, args.width, args.heads, args.layers, args.block_size)


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import nanogpt
    import torch

    import flashgen

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    block = nanogpt.Block(args.width, args.heads, args.block_size).to(device, dtype)
    x = torch.randn(1, min(args.block_size, 100), args.width, device=device, dtype=dtype)
    print(flashgen.explain(block, x))

    def build():
        torch.manual_seed(0)
        return gpt(args).to(device, dtype).train()

    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(3):  # each row counts up from a random start: a stream the model can learn
        start = torch.randint(0, args.vocab, (args.batch, 1), generator=gen)
        seq = (start + torch.arange(args.block_size + 1)) % args.vocab
        batches.append((seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)))
    rows = common.compare_training(
        build, batches, lambda net, b: net(*b), backends=args.backends, warmup=args.warmup,
        steps=args.steps, tokens_per_step=args.batch * args.block_size, device=device,
        smoke=args.smoke, label=f"{args.batch}x{args.block_size}", loss_tol=args.loss_tol,
        lr=1e-3,
        regions=(lambda m: m.h) if args.compile_scope == "layers" else None,
        gpu_lock=args.gpu_lock,
    )  # fmt: skip
    return common.finish(rows, args.json, {"args": vars(args)})


if __name__ == "__main__":
    raise SystemExit(main())
