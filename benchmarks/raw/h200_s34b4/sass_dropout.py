# Session 34 B4 static side (CPU): SASS opcode counts and ptxas spill bytes of the Hopper
# forward with dropout (forced-only), head dims 128 and 64, causal both ways, 4k records
# (Triton 3.6 ptxas). Run as
#   env -u TRITON_INTERPRET PYTHONPATH=/tmp/t36:$PWD .venv/bin/python benchmarks/raw/h200_s34b4/sass_dropout.py
# output: sass_dropout.txt.
import collections
import re

from flashgen.core.spec import KernelSpec
from flashgen.kernels import hopper, hopper_aot

OPS = ["MUFU", "IMAD", "LOP3", "SHF", "ISETP", "FSEL", "SEL", "PRMT", "STL", "LDL", "HGMMA"]
for d in (128, 64):
    for causal in (False, True):
        spec = KernelSpec(d, causal, "bfloat16", "fwd", dropout=True)
        cfg = hopper.config_for(spec, 4096)
        asm = hopper_aot.assemble_sm90(hopper_aot.compile_for_sm90(spec, cfg)["ptx"])
        ops = collections.Counter()
        for line in asm["sass"].splitlines():
            m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m:
                ops[m.group(2).split(".")[0]] += 1
        counts = {k: ops[k] for k in OPS}
        print(d, causal, cfg.short(), sum(ops.values()), "spills", asm["spills"], counts)
