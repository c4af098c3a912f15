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
curves compare something. Dropout is 0, as nanoGPT's default: attention dropout is not a pattern
flashgen replaces (such sites are left to Inductor, and explain says so).
"""

from __future__ import annotations

import math

import common


def parse(argv=None):
    p = common.base_parser(__doc__)
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
    p.add_argument("--loss-tol", type=float, default=0.05)
    args = p.parse_args(argv)
    if args.smoke:
        args.layers, args.heads, args.width, args.block_size, args.batch = 1, 2, 32, 24, 2
        args.vocab, args.steps, args.warmup = 64, 1, 1
        if args.backends == "eager,inductor,flashgen":
            args.backends = "eager,flashgen"
    args.backends = args.backends.split(",")
    return args


def gpt(args):
    """nanoGPT's model (model.py), trimmed to what training needs."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            c, t = args.width, args.block_size
            self.n_head = args.heads
            self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.attn_dropout = nn.Dropout(0.0)
            self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

        def forward(self, x):
            b, t, c = x.size()
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
                       for z in (q, k, v))  # fmt: skip
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            c = args.width
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.attn = CausalSelfAttention()
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(args.vocab, args.width)
            self.wpe = nn.Embedding(args.block_size, args.width)
            self.h = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(args.width)
            self.lm_head = nn.Linear(args.width, args.vocab, bias=False)
            self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

    return GPT(), Block


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import torch

    import flashgen

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    torch.manual_seed(0)
    _, block_cls = gpt(args)
    block = block_cls().to(device, dtype)
    x = torch.randn(1, min(args.block_size, 100), args.width, device=device, dtype=dtype)
    print(flashgen.explain(block, x))

    def build():
        torch.manual_seed(0)
        return gpt(args)[0].to(device, dtype).train()

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
    )  # fmt: skip
    return common.finish(rows, args.json, {"args": vars(args)})


if __name__ == "__main__":
    raise SystemExit(main())
