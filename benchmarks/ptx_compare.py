"""Compile a sample of generated kernels for sm_90 ahead of time (no GPU; Triton with Gluon, e.g.
3.6) and write {spec:kernel: [shared bytes, sha256 of the PTX without debug lines]} to argv[1].

    PYTHONPATH=TREE python3 benchmarks/ptx_compare.py OUT.json     # once per tree, then compare

For a change meant to rename things only: equal PTX (line info, file names and comments
stripped) means the compiler produced the same code. The sample: bf16 d128 causal with window
and softcap (forward pointer/TMA; preprocess, dK/dV and dQ pointer/TMA), f16 d80 (padded head
dim) plain, and the Hopper Gluon forward d128 both causal ways. Config (64, 64), 4 warps, 2
stages; every pointer and int marked divisible by 16, as the JIT does for common shapes."""

import hashlib
import json
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from flashgen.core.spec import KernelSpec
from flashgen.kernels.codegen import load

try:  # where the ahead-of-time compile lives differs between trees
    from flashgen.kernels.hopper_aot import compile_for_sm90
except ImportError:
    from flashgen.kernels.hopper import compile_for_sm90

BM, BN, W, S = 64, 64, 4, 2
FLOAT = {"qk_scale", "scale", "sm_scale", "softcap_raw", "SOFTCAP_RAW"}
PTR = {"Q", "K", "V", "O", "Out", "DO", "DQ", "DK", "DV"}
F32P = {"Lse", "LSE", "Delta"}
TD = {"float16": "fp16", "bfloat16": "bf16"}


def kind(name, spec):
    if name.startswith("desc_"):
        rows = BM if name in ("desc_q", "desc_o", "desc_do") else BN
        return f"tensordesc<{TD[spec.dtype]}[1, 1, {rows}, {spec.block_d}]>"
    if name.startswith("BLOCK_"):
        return "constexpr"
    if name in FLOAT:
        return "fp32"
    if name in F32P:
        return "*fp32"
    if name in PTR:
        return "*" + TD[spec.dtype]
    return "i32"


def strip(ptx):
    ptx = ptx.split(".section\t.debug")[0]
    return "\n".join(x for x in ptx.splitlines() if not re.match(r"\s*(\.loc|\.file|//)", x))


out = {}
specs = [KernelSpec(128, True, "bfloat16", d, True, True) for d in ("fwd", "bwd")] + [
    KernelSpec(80, False, "float16", d) for d in ("fwd", "bwd")
]
for spec in specs:
    mod = load(spec)
    names = (
        ["attn_fwd", "attn_fwd_tma"]
        if spec.direction == "fwd"
        else [
            "attn_bwd_preprocess",
            "attn_bwd_dkdv",
            "attn_bwd_dq",
            "attn_bwd_dkdv_tma",
            "attn_bwd_dq_tma",
        ]
    )
    for kn in names:
        if spec.head_dim == 80 and kn.endswith("_tma"):
            continue
        fn = getattr(mod, kn)
        sig, attrs = {}, {}
        for i, a in enumerate(fn.arg_names):
            k = kind(a, spec)
            sig[a] = k
            if k.startswith("*") or k == "i32":
                attrs[(i,)] = [["tt.divisibility", 16]]
        cex = {"BLOCK_M": BM} if kn == "attn_bwd_preprocess" else {"BLOCK_M": BM, "BLOCK_N": BN}
        c = triton.compile(
            ASTSource(fn=fn, signature=sig, constexprs=cex, attrs=attrs),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": W, "num_stages": S},
        )
        out[f"{spec.uri()}:{kn}"] = [
            int(c.metadata.shared),
            hashlib.sha256(strip(c.asm["ptx"]).encode()).hexdigest()[:16],
        ]
        print(kn, spec.uri(), out[f"{spec.uri()}:{kn}"], flush=True)
for causal in (False, True):
    spec = KernelSpec(128, causal, "bfloat16")
    r = compile_for_sm90(spec)
    out[f"{spec.uri()}:attn_fwd_ws"] = [
        r["shared"],
        hashlib.sha256(strip(r["ptx"]).encode()).hexdigest()[:16],
    ]
    print("ws", spec.uri(), out[f"{spec.uri()}:attn_fwd_ws"], flush=True)
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle, indent=1)
