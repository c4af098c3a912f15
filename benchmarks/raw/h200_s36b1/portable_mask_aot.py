"""Session 35 (CPU): the portable TMA forward with and without an additive mask tensor, compiled
ahead of time for sm_90 (Triton's compiler, no GPU): registers, shared memory, static SASS counts
and what its TTGIR loads (pipelined TMA copies against plain `tt.load`s in the loop).
    env -u TRITON_INTERPRET PYTHONPATH=/path/to/triton36:.:benchmarks \
        python benchmarks/raw/next_s36/portable_mask_aot.py
(Dense mask, causal, head dim 128, bf16, 128 x 64 tiles, 8 warps, 3 stages; MASK_PER_KEY off,
MASK_SHARED 0; the mask's key stride the constant 1, as a launch with a contiguous mask compiles
it. Session 35's version passed it as an int32 argument and read a plain tt.load; with it
specialised the mask tile arrives by pipelined cp.async copies, session 36.)"""

import sys

sys.path.insert(0, "benchmarks")

import sram_vs_compiler as svc  # noqa: E402
import triton  # noqa: E402
from kernel_sass import OPS, sass_counts  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from flashgen.core.config import TileConfig  # noqa: E402
from flashgen.core.spec import KernelSpec  # noqa: E402
from flashgen.kernels.codegen import load_family  # noqa: E402

CONSTEXPRS = ("MASK_PER_KEY", "MASK_SHARED")

for kind in ("", "add"):
    spec = KernelSpec(128, True, "bfloat16", "fwd", attn_mask=kind)
    cfg = TileConfig(128, 64, 8, 3)
    fn = load_family(spec, "portable").attn_fwd_tma
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name == "Mask":
            arg = "*bf16"
        elif name in CONSTEXPRS or name == "stride_mn":
            arg = "constexpr"
        else:
            arg = svc._arg_kind(name, spec.dtype, cfg, spec.block_d)
        sig[name] = arg
        if arg.startswith("*") or arg == "i32":
            attrs[(i,)] = [["tt.divisibility", 16]]
    consts = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}
    if "stride_mn" in fn.arg_names:
        # the launch passes the mask's key stride, 1 for a contiguous mask, which Triton's
        # launcher specialises as the constant 1 (session 36): without it the mask load's
        # contiguity is unknown and the pipeliner leaves it a plain tt.load
        consts["stride_mn"] = 1
    if "MASK_PER_KEY" in fn.arg_names:
        consts.update(MASK_PER_KEY=False, MASK_SHARED=0)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    res, ops = sass_counts(compiled.asm["cubin"])
    counts = " ".join(f"{op}={ops[op]}" for op in OPS)
    print(kind or "none", res, int(compiled.metadata.shared), sum(ops.values()), counts)
    ttgir = compiled.asm["ttgir"]
    for key in ("async_tma_copy_global_to_local", "async_copy_global_to_local", "tt.load"):
        print("  ", key, ttgir.count(key))
