"""Render every kernel family for a grid of specs into a folder, for a before/after diff of the
generated source (no GPU needed): `TRITON_INTERPRET=0|1 PYTHONPATH=TREE python3
benchmarks/render_all.py OUTDIR`, once per tree and mode, then `diff -r`. Covers the window/softcap/lengths/mask-tensor variants and the decode family where the tree has
them. Works on trees from
before the package layout (flat `flashgen.codegen`) and after it (`flashgen.kernels.codegen`)."""

import importlib
import os
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
try:
    codegen = importlib.import_module("flashgen.kernels.codegen")
    spec_mod = importlib.import_module("flashgen.core.spec")
except ImportError:
    codegen = importlib.import_module("flashgen.codegen")
    spec_mod = importlib.import_module("flashgen.spec")
KS = spec_mod.KernelSpec
mode = os.environ.get("TRITON_INTERPRET", "0")
n = 0
fields = getattr(KS, "__dataclass_fields__", {})
# (window, softcap) variants where the tree's KernelSpec has them.
masks = [(False, False, False, "")]
if "window" in fields:
    masks += [(True, False, False, ""), (False, True, False, ""), (True, True, False, "")]
if "lengths" in fields:  # key padding and mask tensors, alone and with a window and softcap
    masks += [(False, False, True, ""), (False, False, False, "bool"), (False, False, False, "add")]
    masks += [(True, True, True, "add"), (True, False, True, "bool")]
for d in (16, 32, 40, 64, 80, 96, 128, 192, 256):
    for causal in (False, True):
        for dtype in ("float16", "bfloat16", "float32"):
            for direction in ("fwd", "bwd"):
                for window, softcap, lengths, attn_mask in masks:
                    extra = {"window": window, "softcap": softcap} if "window" in fields else {}
                    if "lengths" in fields:
                        extra.update(lengths=lengths, attn_mask=attn_mask)
                    spec = KS(d, causal, dtype, direction, **extra)
                    plain = not (window or softcap or lengths or attn_mask)
                    families = ["portable"]
                    if direction == "fwd" and dtype != "float32" and d in (64, 128) and plain:
                        families.append("hopper")
                    if direction == "fwd" and plain and hasattr(codegen, "DECODE_TEMPLATE"):
                        families.append("decode")
                    for family in families:
                        with open(f"{out}/{spec.uri()}-{family}-{mode}.py", "w") as handle:
                            handle.write(codegen.render(spec, family))
                        n += 1
print(n, "rendered into", out)
