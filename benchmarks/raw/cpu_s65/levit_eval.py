"""HF LeViT in eval mode, which caches `attention_biases[:, idxs]` in a dict attribute at its
first call: compiled, the biases changed (the cache cleared by `train()` / `eval()`), compared
with eager again. Prints the sites and both differences (the second beside eager's largest
value).

Usage: TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/raw/cpu_s65/levit_eval.py
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_survey as survey  # noqa: E402 - beside this file


def main() -> None:
    make, inputs = survey.CASES["levit"]
    torch.manual_seed(0)
    model = make().eval()
    torch.manual_seed(1)
    kw = inputs()
    sites: list = []
    compiled = survey._compiled(model, sites)
    with torch.no_grad():
        first = (survey._first(compiled(**kw)) - survey._first(model(**kw))).abs().max().item()
        print("first call", first, [(s.replaced, s.mask) for s in sites])
        model.train()
        model.eval()  # (clears the bias cache)
        for name, p in model.named_parameters():
            if "attention_biases" in name:
                p.normal_()
        want = survey._first(model(**kw))
        model.train()
        model.eval()
        got = survey._first(compiled(**kw))
        print("after new biases", (got - want).abs().max().item(), want.abs().max().item())


if __name__ == "__main__":
    main()
