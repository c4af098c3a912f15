"""Times nn.TransformerEncoder inference: eager, Inductor, flashgen (GPU).

Served for inference (eval mode, under torch.no_grad), the encoder runs PyTorch's fused
`torch._transformer_encoder_layer_fwd` eagerly; torch.compile with Inductor keeps that op; the
flashgen backend writes each fused layer out around its attention where that attention is
replaced (`flashgen.compile.patterns.encoder_layer`). GPU only.

Each shape is checked first (eager's and the compiled outputs against the float32 encoder's,
max abs error over its max abs value) and then timed with `triton.testing.do_bench`
(median), the three side by side in one process, `--rounds` times in turn. Masks: none, or
the causal mask built in forward() by `nn.Transformer.generate_square_subsequent_mask` (a
GPT-style decoder written with encoder layers).

On a GPU the backend writes a layer out only where that was measured to gain
(`flashgen.compile.patterns.choice.FUSED_LAYER_MIN_FLOPS`: a causal mask from 34 GFLOP a
site, never without a mask); `--every-size` writes out every layer whose attention the kernels
take, to time the rewrite itself (how those thresholds were found).

Usage: python benchmarks/encoder_infer.py [--dtype bfloat16] [--rounds 2] [--layers 4]
    [--shapes 8x512x512x8,...] (batch x length x width x heads) [--every-size]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys

SHAPES = "8x512x512x8,4x2048x1024x16,32x128x512x8,1x64x256x4"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=2, help="timing rounds of the three")
    parser.add_argument("--layers", type=int, default=4, help="encoder layers")
    parser.add_argument("--shapes", default=SHAPES, help="batch x length x width x heads, ...")
    parser.add_argument("--json", default=None, help="write every reading here")
    parser.add_argument(
        "--every-size", action="store_true",
        help="write out every fused layer the kernels can take (no size rule)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    import torch
    import triton.testing

    from flashgen.compile.backend import backend
    from flashgen.compile.patterns import choice, counters

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    if args.every_size:
        choice.FUSED_LAYER_MIN_FLOPS.update({False: 0.0, True: 0.0})
    dtype = getattr(torch, args.dtype)
    rows = []
    for shape in args.shapes.split(","):
        b, n, e, h = (int(x) for x in shape.split("x"))
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(e, h, 4 * e, batch_first=True)
        enc = torch.nn.TransformerEncoder(layer, args.layers, enable_nested_tensor=False)
        enc = enc.to("cuda", dtype).eval()
        x = torch.randn(b, n, e, device="cuda", dtype=dtype)
        for mask in ("none", "causal"):

            def f(x, mask=mask, enc=enc):
                if mask == "causal":
                    m = torch.nn.Transformer.generate_square_subsequent_mask(
                        x.shape[1], x.device, x.dtype
                    )
                    return enc(x, mask=m, is_causal=True)
                return enc(x)

            runs = {"eager": f}
            for name in ("inductor", "flashgen"):
                torch._dynamo.reset()
                counters.clear()
                # (flashgen's backend object: the registered name needs flashgen installed)
                chosen = backend() if name == "flashgen" else name
                runs[name] = torch.compile(f, backend=chosen, dynamic=False)
                with torch.no_grad():
                    runs[name](x)
                if name == "flashgen":
                    replaced = counters["mha.replaced"]
            with torch.no_grad():
                # errors against the float32 encoder (eager: its fused layers), each side's
                # max abs error over the reference's max abs value
                ref = f(x.float(), enc=copy.deepcopy(enc).float())
                err = {
                    k: float((runs[k](x).float() - ref).abs().max() / ref.abs().max()) for k in runs
                }
                ms = {k: [] for k in runs}
                for _ in range(args.rounds):
                    for k, fn in runs.items():
                        ms[k].append(
                            triton.testing.do_bench(lambda fn=fn, x=x: fn(x), return_mode="median")
                        )
            row = {
                "shape": shape, "mask": mask, "replaced": replaced, "err": err,
                "ms": ms, "dtype": args.dtype, "layers": args.layers,
                "every_size": args.every_size,
            }  # fmt: skip
            rows.append(row)
            best = {k: min(v) for k, v in ms.items()}
            print(
                f"{shape:>16} {mask:>6} replaced={replaced} err (vs float32) eager "
                f"{err['eager']:.1e} ind {err['inductor']:.1e} fg {err['flashgen']:.1e} | ms eager {best['eager']:.3f} inductor "
                f"{best['inductor']:.3f} flashgen {best['flashgen']:.3f} | flashgen/inductor "
                f"{best['inductor'] / best['flashgen']:.3f}x, /eager "
                f"{best['eager'] / best['flashgen']:.3f}x  (rounds {ms})",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
