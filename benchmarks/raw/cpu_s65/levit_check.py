"""HF LeViT's gradients after session 65's parameter change, well conditioned: training mode
(the attention biases indexed from the parameter, not eval's cache) with the BatchNorms in eval
mode (batch statistics over two images made `hf_survey.py --grad`'s float32 and float64
differ by 6-10% on both sides) and the biases drawn at random (not their zero start). Prints
the sites (replaced, mask kind), the worst parameter-gradient error of the compiled model and
of eager float32 against float64 (`hf_survey.py`'s measure), and the biases' own errors.

Usage: TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/raw/cpu_s65/levit_check.py
"""

from __future__ import annotations

import copy
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_survey as survey  # noqa: E402 - beside this file


def grads(model, kw, w):
    model.zero_grad()
    out = survey._first(model(**kw))
    (out * w.to(out.dtype)).sum().backward()
    params = getattr(model, "_orig_mod", model).named_parameters()  # (compiled: the model's)
    return {n: p.grad.clone() for n, p in params if p.grad is not None}


def main() -> None:
    make, inputs = survey.CASES["levit"]
    torch.manual_seed(0)
    model = make()
    survey._no_dropout(model)
    model.train()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "attention_biases" in name:
                p.normal_()
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.eval()
    ref = copy.deepcopy(model).double()
    torch.manual_seed(1)
    kw = inputs()
    kw64 = {k: v.double() for k, v in kw.items()}
    sites: list = []
    compiled = survey._compiled(model, sites)
    w = torch.randn_like(survey._first(model(**kw)))
    got, eager, want = grads(compiled, kw, w), grads(model, kw, w), grads(ref, kw64, w)
    top = max(r.abs().max().item() for r in want.values())

    def worst(g):
        return max(
            (g[n].double() - r).abs().max().item() / max(r.abs().max().item(), 1e-3 * top)
            for n, r in want.items()
        )

    print("sites", [(s.replaced, s.mask) for s in sites], "compiled", worst(got), "eager",
          worst(eager))  # fmt: skip
    biases = [
        (n, (got[n].double() - r).abs().max().item(), r.abs().max().item())
        for n, r in want.items()
        if "attention_biases" in n
    ]
    print("bias grads (name, max abs error, max abs value)", biases)


if __name__ == "__main__":
    main()
