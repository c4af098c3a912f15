"""Times HF Swin v2 training (random weights): Inductor and flashgen (GPU).

Swin v2's attention is windowed (N = window x window patches a window, many windows a batch),
its scores multiplied by a learned per-head factor, a relative bias and, in shifted blocks, a
mask added per window; the flashgen backend replaces such sites since session 66
(`flashgen.compile.patterns.window_views`, `core.head_factor`). On a GPU a site with a dense
additive mask is replaced only from the FLOPs where flashgen's masked path was measured to
gain (`choice.masked_keep_reason`); `--every-size` replaces every site, to time the rewrite
itself at sizes the rule keeps.

Each size is checked first (the compiled model's output against a float32 copy in eager,
max abs error over the reference's max abs value, beside eager's own) and then timed with
`triton.testing.do_bench` (median), Inductor and flashgen side by side in one process,
`--rounds` times in turn: a training step (forward and backward of a random-weighted sum of
the last hidden state) and, with `--infer`, the forward under no_grad.

Usage: python benchmarks/swin_train.py [--batches 32,64] [--image 256] [--window 8]
    [--rounds 3] [--every-size] [--infer] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="32,64", help="batch sizes, comma-separated")
    parser.add_argument("--image", type=int, default=256, help="image side (pixels)")
    parser.add_argument("--window", type=int, default=8, help="window side (patches)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds of the two")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--every-size", action="store_true", help="no size rule: every site")
    parser.add_argument("--infer", action="store_true", help="also time the forward alone")
    parser.add_argument("--json", default=None, help="write every reading here")
    args = parser.parse_args(argv)

    import torch
    import transformers
    import triton.testing

    from flashgen.compile.backend import backend
    from flashgen.compile.patterns import choice, counters

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    if args.every_size:
        for table in (choice.HAND_WRITTEN_MIN_FLOPS, choice.MASKED_MIN_FLOPS_ADDITIVE):
            table.update({key: 0.0 for key in table})
    dtype = getattr(torch, args.dtype)
    # Swin v2-T: embed 96, depths 2/2/6/2, heads 3/6/12/24 (head dim 32)
    cfg = transformers.Swinv2Config(
        image_size=args.image, window_size=args.window, embed_dim=96, depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24], drop_path_rate=0.0, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Swinv2Model(cfg).to("cuda", dtype).train()
    ref_model = copy.deepcopy(model).float()
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        x = torch.randn(batch, 3, args.image, args.image, device="cuda", dtype=dtype)
        runs, replaced = {}, 0
        for name in ("inductor", "flashgen"):
            torch._dynamo.reset()
            counters.clear()
            # (flashgen's backend object: the registered name needs flashgen installed)
            runs[name] = torch.compile(model, backend=backend() if name == "flashgen" else name)
            out = runs[name](pixel_values=x).last_hidden_state
            if name == "flashgen":
                replaced = counters["matmul.replaced"]
        w = torch.randn_like(out)
        with torch.no_grad():
            ref = ref_model(pixel_values=x.float()).last_hidden_state
            scale = ref.abs().max()
            err = {"eager": float((model(pixel_values=x).last_hidden_state.float() - ref).abs()
                                  .max() / scale)}  # fmt: skip
            for name, fn in runs.items():
                got = fn(pixel_values=x).last_hidden_state.float()
                err[name] = float((got - ref).abs().max() / scale)

        def step(fn, x=x, w=w):
            model.zero_grad(set_to_none=True)
            (fn(pixel_values=x).last_hidden_state * w).sum().backward()

        def forward(fn, x=x):
            with torch.no_grad():
                fn(pixel_values=x)

        modes = {"train": step, **({"infer": forward} if args.infer else {})}
        for mode, call in modes.items():
            ms = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, fn in runs.items():
                    ms[name].append(triton.testing.do_bench(
                        lambda fn=fn, call=call: call(fn), return_mode="median"))  # fmt: skip
            best = {k: min(v) for k, v in ms.items()}
            row = {
                "batch": batch, "image": args.image, "window": args.window, "mode": mode,
                "replaced": replaced, "err": err, "ms": ms, "dtype": args.dtype,
                "every_size": args.every_size,
            }  # fmt: skip
            rows.append(row)
            print(
                f"B{batch} {args.image}px window {args.window} {mode:>5} replaced={replaced} "
                f"err (vs float32) eager {err['eager']:.1e} inductor {err['inductor']:.1e} "
                f"flashgen {err['flashgen']:.1e} | ms inductor {best['inductor']:.3f} flashgen "
                f"{best['flashgen']:.3f} | inductor/flashgen "
                f"{best['inductor'] / best['flashgen']:.3f}x  (rounds {ms})",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
