"""nn.Transformer trained the way PyTorch's tutorials train it (a causal tgt_mask, key padding
masks for source and target, dropout) under torch.compile: the flashgen backend against
Inductor, forward and forward+backward, timed alternately (needs CUDA; --smoke checks the
script on the CPU).

    python benchmarks/transformer_masks.py --out transformer_masks.json

The masks are boolean (one dtype: a float tgt_mask beside boolean padding masks makes PyTorch
warn, a graph break that leaves the model eager under any backend). The backend replaces every
attention site: the encoder's and the cross-attention's as key padding, the decoder's
self-attention with its tgt_mask and padding read as one mask tensor (`flashgen.compile.patterns.
mha`). Each entry but the first is padded on the right by a share of its length. Both backends
compile the same model; with dropout off for the check, their outputs at the valid target
positions and the gradient of a random-weighted loss of them with respect to the target
embeddings are compared
with a float32 copy (flashgen's error at most twice Inductor's plus 1e-3); then both are timed
with the model's dropout on (training), `--rounds` alternating do_bench readings. A ratio is
Inductor's median over flashgen's (> 1: flashgen faster). Exit status 1 when the check fails or
no site was replaced or left to PyTorch on purpose (`kept`: too small for flashgen to gain).
"""

from __future__ import annotations

import argparse
import copy
import time


def padding(batch: int, seq: int, device):
    """[batch, seq] boolean key padding mask (True hides): entry b padded on the right by
    b / (2 * batch) of the length."""
    import torch

    pad = torch.zeros(batch, seq, dtype=torch.bool, device=device)
    for b in range(1, batch):
        pad[b, seq - seq * b // (2 * batch) :] = True
    return pad


def main(argv: list[str] | None = None) -> int:
    from flashgen.bench.harness import backend_script_args, gpu_or_smoke

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--src", type=int, default=1024, help="source length")
    ap.add_argument("--tgt", type=int, default=1024, help="target length")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    ap.add_argument("--dropout", type=float, default=0.1)
    backend_script_args(ap, rounds=3, rep=40)
    args = ap.parse_args(argv)
    import torch

    cuda = gpu_or_smoke(args.smoke)
    if cuda is None:
        return 2
    if not cuda:
        args.batch, args.src, args.tgt, args.width, args.heads = 2, 9, 7, 64, 4
        args.layers, args.rounds = 1, 1
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

    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    torch.manual_seed(0)
    reference = torch.nn.Transformer(
        d_model=args.width, nhead=args.heads, num_encoder_layers=args.layers,
        num_decoder_layers=args.layers, dim_feedforward=2 * args.width, dropout=args.dropout,
        batch_first=True,
    ).to(dev).float()  # fmt: skip
    model = copy.deepcopy(reference).to(dtype)
    gen = torch.Generator(device=dev).manual_seed(1)
    src = torch.randn(args.batch, args.src, args.width, device=dev, generator=gen)
    tgt = torch.randn(args.batch, args.tgt, args.width, device=dev, generator=gen)
    kw = dict(
        tgt_mask=torch.ones(args.tgt, args.tgt, dtype=torch.bool, device=dev).triu(1),
        tgt_is_causal=True, src_key_padding_mask=padding(args.batch, args.src, dev),
        tgt_key_padding_mask=padding(args.batch, args.tgt, dev),
        memory_key_padding_mask=padding(args.batch, args.src, dev),
    )  # fmt: skip
    valid = ~kw["tgt_key_padding_mask"][..., None]
    x = src.to(dtype)
    y = tgt.to(dtype).requires_grad_()
    yf = tgt.detach().requires_grad_()
    # random weights on the valid positions: the model ends in a LayerNorm, whose rows' sum and
    # sum of squares do not move, so those would leave no gradient to compare
    weights = torch.randn(tgt.shape, device=dev, generator=gen) * valid

    def loss_of(out):
        return (out.float() * weights).sum()

    # the check: dropout off (eval), float32 reference
    reference.eval()
    model.eval()
    ref = reference(src, yf, **kw) * valid
    (gref,) = torch.autograd.grad(loss_of(ref), yf)
    before, kept_before = patterns.replaced_total(), patterns.kept_total()
    runs = backend_pair(model, cuda)
    report: dict = {"meta": run_meta(dev), "args": vars(args), "compile_s": {}, "err": {}}
    for name, fn in runs.items():
        start = time.perf_counter()
        out = fn(x, y, **kw) * valid
        (grad,) = torch.autograd.grad(loss_of(out), y)
        report["err"][name] = [rel_err(out, ref), rel_err(grad, gref)]
        if cuda:
            torch.cuda.synchronize()
        report["compile_s"][name] = round(time.perf_counter() - start, 1)
    report["explain"] = str(flashgen.explain(model, x, y, **kw))
    model.train()  # the timing: dropout on, as in training
    # what the timed (training) graphs run: with dropout on, a site's choice may differ from the
    # check's (session 46's JSON counted the eval graphs' sites only)
    report["explain_train"] = str(flashgen.explain(model, x, y, **kw))
    report["replaced"] = patterns.replaced_total() - before
    report["kept"] = patterns.kept_total() - kept_before
    report["ok"] = report["replaced"] + report["kept"] > 0 and all(
        ours <= 2 * theirs + 1e-3
        for ours, theirs in zip(report["err"]["flashgen"], report["err"]["inductor"], strict=True)
    )
    timer = gpu_timer(args.rep) if cuda else wall_timer(1)

    def forward(fn):
        def run():
            with torch.no_grad():
                return fn(x, y, **kw)

        return run

    def forward_backward(fn):
        return lambda: torch.autograd.grad(loss_of(fn(x, y, **kw)), y)

    modes = {"fwd": forward, "fwd_bwd": forward_backward}
    return report_backends(report, runs, modes, timer, args.rounds, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
