"""HF Swin v2-T under torch.compile: flashgen's backend against Inductor.

    python benchmarks/swin_train.py --out swin.json [--every-size]

The model has random weights. Its attention is windowed (window x window patches a window,
many windows a batch), its scores multiplied by a learned per-head factor, a relative bias
and, in shifted blocks, a mask added per window; the flashgen backend replaces such sites
since session 66 (`flashgen.compile.patterns.window_views`, `core.head_factor`). On a GPU a
site with a dense additive mask is replaced only from the FLOPs where flashgen's masked path
was measured to gain (`choice.masked_keep_reason`); `--every-size` replaces every site, to
time the rewrite itself at sizes the rule keeps.

Both backends compile the same bfloat16 model (`flashgen.bench.harness.backend_pair`); their
outputs and parameter gradients are checked against a float32 copy (flashgen's error may not
exceed twice Inductor's plus 1e-3); then the forward under no_grad and a training step (the
gradients of a weighted sum of the last hidden state) are timed in turn for `--rounds` rounds
(`harness.report_backends`: ratios are Inductor's median over flashgen's). `--smoke` runs a
small model on the CPU.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from flashgen.bench.harness import backend_script_args, gpu_or_smoke

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--image", type=int, default=256, help="image side (pixels)")
    ap.add_argument("--window", type=int, default=8, help="window side (patches)")
    ap.add_argument("--every-size", action="store_true", help="no size rule: every site")
    backend_script_args(ap, rounds=5, rep=40)
    args = ap.parse_args(argv)

    import torch
    import transformers

    cuda = gpu_or_smoke(args.smoke)
    if cuda is None:
        return 2
    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    # Swin v2-T: embed 96, depths 2/2/6/2, heads 3/6/12/24 (head dim 32); the smoke run's small
    size = dict(embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24])
    if not cuda:
        size = dict(embed_dim=32, depths=[2, 2], num_heads=[2, 4], patch_size=4)
        args.batch, args.image, args.window, args.rounds = 2, 32, 4, 1

    import flashgen
    from flashgen.bench.harness import (
        backend_pair,
        gpu_timer,
        rel_err,
        report_backends,
        run_meta,
        wall_timer,
    )
    from flashgen.compile import patterns
    from flashgen.compile.patterns import choice

    if args.every_size:
        for table in (choice.HAND_WRITTEN_MIN_FLOPS, choice.MASKED_MIN_FLOPS_ADDITIVE):
            table.update({key: 0.0 for key in table})
    cfg = transformers.Swinv2Config(
        image_size=args.image, window_size=args.window, drop_path_rate=0.0,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **size,
    )  # fmt: skip
    torch.manual_seed(0)
    reference = transformers.Swinv2Model(cfg).to(dev).train()
    model = copy.deepcopy(reference).to(dtype)
    x = torch.randn(args.batch, 3, args.image, args.image, device=dev, dtype=dtype)
    ref = reference(pixel_values=x.float()).last_hidden_state
    w = torch.randn_like(ref)
    ref_grads = torch.autograd.grad((ref * w).sum(), list(reference.parameters()))
    params = list(model.parameters())
    w = w.to(dtype)

    def step(fn):
        return torch.autograd.grad((fn(pixel_values=x).last_hidden_state * w).sum(), params)

    before = patterns.replaced_total()
    kept_before = patterns.kept_total()
    runs = backend_pair(model, cuda)
    report: dict = {"meta": run_meta(dev), "args": vars(args), "compile_s": {}, "err": {}}
    for name, fn in runs.items():
        start = time.perf_counter()
        out = fn(pixel_values=x).last_hidden_state
        grads = step(fn)
        report["err"][name] = [
            rel_err(out, ref),
            max(rel_err(g, r) for g, r in zip(grads, ref_grads, strict=True)),
        ]
        if cuda:
            torch.cuda.synchronize()
        report["compile_s"][name] = round(time.perf_counter() - start, 1)
    report["replaced"] = patterns.replaced_total() - before
    report["kept"] = patterns.kept_total() - kept_before
    report["explain"] = str(flashgen.explain(model, pixel_values=x))
    report["ok"] = report["replaced"] + report["kept"] > 0 and all(
        ours <= 2 * theirs + 1e-3
        for ours, theirs in zip(report["err"]["flashgen"], report["err"]["inductor"], strict=True)
    )
    timer = gpu_timer(args.rep) if cuda else wall_timer(1)

    def forward(fn):
        def run():
            with torch.no_grad():
                return fn(pixel_values=x)

        return run

    modes = {"fwd": forward, "train": lambda fn: lambda: step(fn)}
    return report_backends(report, runs, modes, timer, args.rounds, args.out)


if __name__ == "__main__":
    sys.exit(main())
