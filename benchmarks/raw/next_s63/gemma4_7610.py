"""Session 63: where HF Gemma-4's case 7610 of hf_fuzz's EXTRA_DECODERS draw reads its
differences (the autocast sweep's highest ratio, 2.18). Runs the case three times, printing
each compared figure as it is taken (`Judge.outputs` / `Judge.grads`, their callers named):
float32 with flashgen's pass, float32 compiled without it (aot_eager alone: the compile's own
share of the gradient difference), and float16 (judged against a float32 copy).
`TRITON_INTERPRET=1 PYTHONPATH=$PWD python benchmarks/raw/next_s63/gemma4_7610.py`; its
readings (warnings left out) in gemma4_7610_cpu.txt."""

import os
import sys
import traceback

sys.path.insert(0, "benchmarks")
os.environ.setdefault("FLASHGEN_IMPL", "flashgen")
import hf_fuzz  # noqa: E402

FAMILIES = sorted(hf_fuzz.EXTRA_DECODERS)
outputs, grads = hf_fuzz.Judge.outputs, hf_fuzz.Judge.grads


def told_outputs(self, got, want, ref=None, valid=True):
    figure = outputs(self, got, want, ref, valid)
    caller = traceback.extract_stack()[-2].name
    print(f"  outputs ({caller}, {tuple(got.shape)}): {figure:.3g}", flush=True)
    return figure


def told_grads(self, got, want, ref=None):
    figure = grads(self, got, want, ref)
    print(f"  gradients: {figure:.3g}", flush=True)
    return figure


hf_fuzz.Judge.outputs, hf_fuzz.Judge.grads = told_outputs, told_grads
for name, kw in (("float32", {}), ("float32, no flashgen pass", {"plain": True}),
                 ("float16", {"dtype": "float16"})):  # fmt: skip
    print(name, flush=True)
    rec = hf_fuzz.run_case(7610, FAMILIES, grad=True, **kw)
    print(f"  -> {rec['family']}, {rec['replaced']} of {rec['found']} sites replaced, "
          f"worst {rec['diff']:.3g}", flush=True)  # fmt: skip
