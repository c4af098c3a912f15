# Session 34 B5 static side (CPU): SASS opcode counts and ptxas spill bytes of the Hopper
# forward, head dim 128's 4k record, plain and ALiBi, causal both ways (Triton 3.6 ptxas). Run at
# b9b83f0 (before) and 727a9e0 (after) as
#   env -u TRITON_INTERPRET PYTHONPATH=/tmp/t36:$PWD .venv/bin/python benchmarks/raw/h200_s34b5/sass_alibi.py
# output: sass_alibi.txt.
import collections
import re

from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper, hopper_aot

OPS = ["MUFU", "I2F", "I2FP", "FFMA", "FADD", "FMUL", "FMNMX", "VIADD", "LDS", "HGMMA"]
for name, kw in [("plain", {}), ("alibi", {"alibi": True})]:
    for causal in (False, True):
        spec = KernelSpec(128, causal, "bfloat16", "fwd", **kw)
        cfg = hopper.config_for(spec, 4096)
        asm = hopper_aot.assemble_sm90(hopper_aot.compile_for_sm90(spec, cfg)["ptx"])
        ops = collections.Counter()
        for line in asm["sass"].splitlines():
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m:
                ops[m.group(2).split(".")[0]] += 1
        counts = {k: ops[k] for k in OPS}
        print(name, causal, cfg.short(), sum(ops.values()), "spills", asm["spills"], counts)
