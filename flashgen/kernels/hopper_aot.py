"""The Hopper forward family compiled ahead of time for sm_90, without a GPU: the shared bytes
and PTX the compiler gives a spec and config, and the spill bytes ptxas reports for that PTX.

Why apart from `flashgen.kernels.hopper` (the family's choice and launcher): nothing here
launches; the tests and `benchmarks/ptx_compare.py` use it to hold the fit and register models
(`flashgen.hardware.hopper_tiles`) to the real compiler on CPU machines.
"""

from __future__ import annotations

import os

from ..core.hopper_config import HopperConfig
from .hopper import _MASK_TMA_GL, CONFIGS, constexprs_of, for_spec, has_mask_tma


def compile_for_sm90(
    spec,
    cfg: HopperConfig | None = None,
    per_key: bool = False,
    ranges: bool = False,
    splits: int = 1,
    fixed: bool = False,
    mask_dtype: str | None = None,
    mask_bufs: int = 1,
) -> dict:
    """Compile the rendered kernel ahead of time for sm_90, no GPU needed, with the launch's
    specialisation (`per_key`, `ranges`: MASK_PER_KEY and MASK_RANGES of a spec with a mask
    tensor; `splits`: TAIL_SPLIT; `fixed`: FIXED_MAX; as `flashgen.kernels.hopper.plan` passes
    them; `mask_dtype`: in a rendering with MASK_TMA (`hopper.has_mask_tma`), the mask's torch
    dtype name read by TMA ("bool", "bfloat16", ...; MASK_TMA = `mask_bufs`), None: the
    gathered loads (MASK_TMA 0)); returns
    {"shared": bytes, "ptx": text}. Must run in a process that imported
    Triton without TRITON_INTERPRET=1: there Gluon's own jit helpers (gl.cdiv, gl.max, ...)
    are interpreter wrappers the compiler refuses."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from .codegen import load_family

    cfg = for_spec(cfg or CONFIGS[spec.head_dim], spec)
    short = {"bfloat16": "bf16", "float16": "fp16"}[spec.dtype]

    def desc(rows):
        block = [1, 1, rows, spec.head_dim]
        layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, spec.dtype))
        return f"tensordesc<{short}{block},{layout!r}>"

    rows_q = cfg.block_m // cfg.consumers
    signature = {
        "desc_q": desc(rows_q), "desc_k": desc(cfg.block_n), "desc_v": desc(cfg.block_n),
        "desc_o": desc(rows_q), "Lse": "*fp32", "Sched": "*i32",
        "Part": "*fp32", "PartLse": "*fp32", "BATCH": "i32", "H": "i32", "GROUP": "i32", "SEQ_Q": "i32",
        "SEQ_K": "i32", "qk_scale": "fp32",
    }  # fmt: skip
    if spec.window:
        signature.update(WIN_LEFT="i32", WIN_RIGHT="i32")
    if spec.softcap:
        signature["softcap_raw"] = "fp32"
    if spec.lengths:
        signature["SeqBounds"] = "*i32"
    if spec.attn_mask:
        signature["Mask"] = "*i1" if spec.attn_mask == "bool" else f"*{short}"
        signature.update(stride_mb="i32", stride_mh="i32", stride_mm="i32", stride_mn="i32")
    if spec.alibi:
        signature.update(Slopes="*fp32", stride_sb="i32")
    if spec.dropout:
        signature.update(drop_p="fp32", drop_seed="i64")
    if spec.attn_mask:  # without MASK_RANGES the mask itself stands in (never read)
        signature.update(MaskTab="*i32" if ranges else signature["Mask"], stride_tb="i32",
                         stride_th="i32")  # fmt: skip
    tma_mask = None
    if has_mask_tma(spec):  # desc_mask: the mask's descriptor with MASK_TMA, else the mask
        tma_mask = mask_bufs if mask_dtype is not None else 0
        signature["desc_mask"] = signature["Mask"]
        if mask_dtype is not None:
            name = _MASK_TMA_GL[mask_dtype]
            block = [1, 1, rows_q, cfg.block_n]
            layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, name))
            elem = {"uint8": "u8", "bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[name]
            signature["desc_mask"] = f"tensordesc<{elem}{block},{layout!r}>"
    elif mask_dtype is not None:
        raise ValueError(f"{spec.uri()}: this rendering has no MASK_TMA (FLASHGEN_MASK_TMA)")
    constexprs = constexprs_of(spec, cfg, per_key, ranges, splits, fixed, tma_mask)
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    pointers = [i for i, name in enumerate(signature)
                if name in ("Lse", "Sched", "Part", "PartLse", "SeqBounds", "Mask", "Slopes",
                            "MaskTab")]  # fmt: skip
    source = GluonASTSource(
        fn=load_family(spec, "hopper").attn_fwd_ws,
        signature=signature,
        constexprs=constexprs,
        # Lse, Sched, Part, PartLse (and SeqBounds...): the JIT's 16-byte pointer specialisation
        attrs={(i,): [["tt.divisibility", 16]] for i in pointers},
    )
    kernel = triton.compile(
        source,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": cfg.num_warps, "maxnreg": cfg.maxnreg},
    )
    return {"shared": kernel.metadata.shared, "ptx": kernel.asm["ptx"]}


def assemble_sm90(ptx: str) -> dict | None:
    """`ptx` (from `compile_for_sm90`) assembled for sm_90a by the ptxas Triton ships, once:
    {"spills": the spill-store bytes ptxas reports (None if it reports none in a known form),
    "cubin": bytes, "sass": its disassembly by Triton's cuobjdump}; None where either tool
    cannot be found or run. The register model
    (`flashgen.hardware.hopper_tiles.spill_risk`) is checked against "spills", where ptxas puts
    its waits (`pv_overlap`) against "sass"."""
    import re
    import subprocess
    import tempfile

    try:
        from triton.backends.nvidia.compiler import get_ptxas

        ptxas = get_ptxas(90).path
    except Exception:  # no NVIDIA backend, or a Triton that moved the helper
        return None
    cuobjdump = os.path.join(os.path.dirname(ptxas), "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        try:
            done = subprocess.run([ptxas, "-arch=sm_90a", "-v", src, "-o", cubin], check=True,
                                  capture_output=True, text=True, timeout=300)  # fmt: skip
            sass = subprocess.run([cuobjdump, "-sass", cubin], check=True,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return None
        with open(cubin, "rb") as f:
            binary = f.read()
    found = re.findall(r"(\d+) bytes spill stores", done.stderr)  # none: a format not known
    spills = sum(map(int, found)) if found else None
    return {"spills": spills, "cubin": binary, "sass": sass.stdout}


def pv_overlap(sass: str) -> list[int]:
    """For each wait for the QK^T product (`WARPGROUP.DEPBAR.LE gsb0, 0x1`: the consumer loop's,
    with the previous PV still in flight) the MUFU instructions (the softmax's exponentials)
    ptxas placed before the next wait for every product (`... 0x0`): what of a softmax runs
    while the previous PV does. 0 where ptxas hoisted that wait to the softmax's start."""
    import re

    lines = re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]+);", sass)
    counts = []
    for i, ins in enumerate(lines):
        if "DEPBAR.LE gsb0, 0x1" not in ins:
            continue
        mufu = 0
        for later in lines[i + 1 :]:
            if "DEPBAR.LE gsb0, 0x0" in later:
                counts.append(mufu)
                break
            mufu += "MUFU" in later
    return counts
