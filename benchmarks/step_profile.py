"""Which CUDA kernels one training step of the ViT example runs, per backend (needs CUDA).

The ViT encoder of `examples/vision_encoder.py` (ViT-B/16 at 224 px: 197 tokens) is compiled with
Inductor and with flashgen's backend; after warm-up steps, a few steps run under
`torch.profiler` and the kernels are listed by total CUDA time, with the step time, so a
difference between the two backends can be pinned to kernels (attention's own, copies around
it, or the launches between them).

    python benchmarks/step_profile.py --backends inductor,flashgen --steps 5 --top 25
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def main(argv=None) -> None:
    import common
    import vision_encoder

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="inductor,flashgen")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--vit", default="", help="extra vision_encoder.py flags, e.g. '--image 512'")
    args = p.parse_args(argv)
    vargs = vision_encoder.parse(args.vit.split())

    import torch
    from torch.profiler import ProfilerActivity, profile

    tokens = (vargs.image // vargs.patch) ** 2 + 1
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(vargs.batch, 3, vargs.image, vargs.image, generator=gen)
    images = images.to("cuda", torch.bfloat16)
    labels = torch.randint(0, vargs.classes, (vargs.batch,), generator=gen).to("cuda")
    for name in args.backends.split(","):
        common.reset("cuda")
        torch.manual_seed(0)
        model = vision_encoder.vit(vargs).to("cuda", torch.bfloat16).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        run = common.compiled(model, name)

        def step(run=run, opt=opt):
            loss = run(images, labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) / args.steps * 1e3
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.steps):
                step()
            torch.cuda.synchronize()
        print(
            f"=== {name}: {vargs.batch}x{tokens}, {ms:.2f} ms/step unprofiled, "
            f"{vargs.batch * tokens / ms * 1e3:,.0f} tokens/s"
        )
        print(
            prof.key_averages().table(
                sort_by="cuda_time_total", row_limit=args.top, max_name_column_width=70
            )
        )


if __name__ == "__main__":
    main()
