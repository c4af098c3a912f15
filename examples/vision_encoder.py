"""Train a ViT-style vision encoder (non-causal attention over patch tokens) three ways.

    python examples/vision_encoder.py                       # ViT-B/16 at 224 px: 197 tokens
    python examples/vision_encoder.py --image 512 --batch 32 --json vit.json   # 1025 tokens
    python examples/vision_encoder.py --smoke               # tiny, CPU interpreter (CI)

A ViT encoder as timm writes it: a strided convolution cuts the image into patches, a class
token and learned position embeddings are added, and each block runs pre-norm multi-head
self-attention through `F.scaled_dot_product_attention` with no mask (every patch sees every
patch; the length, (image / patch)^2 + 1, is odd) and an MLP. The same seeded encoder is trained
for classification on the same random batches eagerly, with `torch.compile` (Inductor) and with
`torch.compile(backend="flashgen")`; the table gives tokens/s (images/s x tokens per image), peak
memory over the timed steps and whether the loss curves agree with eager's (--loss-tol).
"""

from __future__ import annotations

import common


def parse(argv=None):
    p = common.base_parser(__doc__)
    common.add_gpu_lock(p)
    p.add_argument("--image", type=int, default=224, help="image side in pixels (default 224)")
    p.add_argument("--patch", type=int, default=16)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--classes", type=int, default=1000)
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
        args.image, args.patch, args.layers, args.width, args.heads = 20, 4, 1, 32, 2
        args.batch, args.classes, args.steps, args.warmup = 2, 10, 1, 1
    if args.image % args.patch:
        p.error(f"--image ({args.image}) must be a multiple of --patch ({args.patch})")
    args.backends = common.backend_list(args)
    return args


def vit(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = args.heads
            self.qkv = nn.Linear(args.width, 3 * args.width)
            self.proj = nn.Linear(args.width, args.width)

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(*qkv.unbind(0))  # no mask: bidirectional
            return self.proj(y.transpose(1, 2).reshape(b, n, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            c = args.width
            self.norm1, self.norm2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(c, 4 * c), nn.GELU(), nn.Linear(4 * c, c))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            c, tokens = args.width, (args.image // args.patch) ** 2 + 1
            self.patch = nn.Conv2d(3, c, args.patch, stride=args.patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, c))
            self.pos = nn.Parameter(torch.randn(1, tokens, c) * 0.02)
            self.blocks = nn.Sequential(*(Block() for _ in range(args.layers)))
            self.norm = nn.LayerNorm(c)
            self.head = nn.Linear(c, args.classes)

        def forward(self, images, labels):
            x = self.patch(images).flatten(2).transpose(1, 2)
            x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            x = self.norm(self.blocks(x))
            return F.cross_entropy(self.head(x[:, 0]).float(), labels)

    return ViT()


def main(argv=None) -> int:
    args = parse(argv)
    device = common.setup(args)
    import torch

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    tokens = (args.image // args.patch) ** 2 + 1

    def build():
        torch.manual_seed(0)
        return vit(args).to(device, dtype).train()

    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(args.batch, 3, args.image, args.image, generator=gen).to(device, dtype),
         torch.randint(0, args.classes, (args.batch,), generator=gen).to(device))
        for _ in range(3)
    ]  # fmt: skip
    rows = common.compare_training(
        build, batches, lambda net, b: net(*b), backends=args.backends, warmup=args.warmup,
        steps=args.steps, tokens_per_step=args.batch * tokens, device=device, smoke=args.smoke,
        label=f"{args.batch}x{tokens}", loss_tol=args.loss_tol, lr=1e-4,
        regions=(lambda m: m.blocks) if args.compile_scope == "layers" else None,
        gpu_lock=args.gpu_lock,
    )  # fmt: skip
    for r in rows:
        r["images_per_s"] = r["tokens_per_s"] / tokens if r.get("tokens_per_s") else None
    columns = common.TRAIN_COLUMNS[:3] + [("images_per_s", "images/s", ".0f")]
    return common.finish(rows, args.json, {"args": vars(args)}, columns + common.TRAIN_COLUMNS[3:])


if __name__ == "__main__":
    raise SystemExit(main())
