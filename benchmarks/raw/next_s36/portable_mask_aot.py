import sys, os
sys.path.insert(0, "benchmarks")
import sram_vs_compiler as svc
from kernel_sass import sass_counts, OPS
from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from flashgen.kernels.codegen import load_family
for am in ("", "add"):
    spec = KernelSpec(128, True, "bfloat16", "fwd", attn_mask=am)
    cfg = TileConfig(128, 64, 8, 3)
    fn = getattr(load_family(spec, "portable"), "attn_fwd_tma")
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        kind = "*bf16" if name == "Mask" else ("constexpr" if name in ("MASK_PER_KEY", "MASK_SHARED") else svc._arg_kind(name, spec.dtype, cfg, spec.block_d))
        sig[name] = kind
        if kind.startswith("*") or kind == "i32":
            attrs[(i,)] = [["tt.divisibility", 16]]
    consts = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}
    if "MASK_PER_KEY" in fn.arg_names: consts.update(MASK_PER_KEY=False, MASK_SHARED=0)
    print(fn.arg_names)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
    res, ops = sass_counts(c.asm["cubin"])
    print(am, res, int(c.metadata.shared), sum(ops.values()), " ".join(f"{op}={ops[op]}" for op in OPS))
    tg = c.asm["ttgir"]
    open(f"/tmp/port_{am or 'plain'}.ttgir", "w").write(tg)
    for key in ("async_copy_global_to_local", "async_tma_copy_global_to_local", "local_load", "tt.load", "convert_layout", "async_wait"):
        print("  ", key, tg.count(key))
