# Session 33 B3 static side (CPU): SASS opcode counts of the Hopper forward, head dim 128 record,
# plain / softcap / softcap with FIXED_MAX (and causal, windowed), Triton 3.6 ptxas. Run as
#   env -u TRITON_INTERPRET PYTHONPATH=/tmp/t36:$PWD .venv/bin/python benchmarks/raw/h200_s33b3/sass_counts.py
# (writes the SASS to /tmp/sc/); output: sass_counts.txt.
import collections
import re

from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper, hopper_aot

res = {}
for name, kw in [
    ("plain", {}),
    ("softcap", {"softcap": True}),
    ("softcap_fixed", {"softcap": True, "fixed": True}),
    ("softcap_causal_fixed", {"softcap": True, "causal": True, "fixed": True}),
    ("softcap_window_fixed", {"softcap": True, "window": True, "fixed": True}),
    ("softcap_window", {"softcap": True, "window": True}),
]:
    causal = kw.pop("causal", False)
    fixed = kw.pop("fixed", False)
    spec = KernelSpec(128, causal, "bfloat16", "fwd", **kw)
    cfg = hopper.for_spec(hopper.CONFIGS[128], spec)
    r = hopper_aot.compile_for_sm90(spec, cfg, fixed=fixed)
    asm = hopper_aot.assemble_sm90(r["ptx"])
    sass = asm["sass"]
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            ops[m.group(2).split(".")[0]] += 1
    with open(f"/tmp/sc/{name}.sass", "w") as f:
        f.write(sass)
    tot = sum(ops.values())
    print(
        name,
        tot,
        {
            k: ops[k]
            for k in [
                "MUFU",
                "FMNMX",
                "FMUL",
                "FFMA",
                "FADD",
                "SHFL",
                "F2FP",
                "FSEL",
                "FSETP",
                "HGMMA",
                "WARPGROUP",
            ]
        },
        "spills",
        asm["spills"],
    )
