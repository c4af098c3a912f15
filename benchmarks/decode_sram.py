"""The decode kernel's shared-memory model (flashgen.hardware.decode.smem_bytes) against the real
Triton compiler for sm_90, ahead of time on a CPU machine (no GPU needed).

    env -u TRITON_INTERPRET PYTHONPATH=. /path/to/python benchmarks/decode_sram.py

Compiles `attn_decode_split` (bf16, head dims 64/128/256, causal and not) for a sample of
DecodeConfig candidates with the JIT's specialisation (pointers and strides divisible by 16) and
prints modelled vs compiled bytes; "under" counts configs the model puts below the compiler
(a false admit where the model says it fits and the compiler exceeds the H200's limit).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(Path(__file__).resolve().parent.parent))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from flashgen.core.spec import KernelSpec  # noqa: E402
from flashgen.hardware import decode as hw  # noqa: E402
from flashgen.hardware.sram import KNOWN_GPUS  # noqa: E402
from flashgen.kernels.codegen import load_family  # noqa: E402

LIMIT = KNOWN_GPUS["nvidia-h200"].smem_optin_bytes


def compile_bytes(spec: KernelSpec, cfg: hw.DecodeConfig, block_m: int) -> int:
    fn = load_family(spec, "decode").attn_decode_split
    names = list(fn.arg_names)
    sig = {}
    for name in names:
        if name in ("Q", "K", "V"):
            sig[name] = "*bf16"
        elif name in ("Out", "Lse"):
            sig[name] = "*fp32"
        elif name == "qk_scale":
            sig[name] = "fp32"
        elif name in ("BLOCK_M", "BLOCK_N", "FINAL"):
            sig[name] = "constexpr"
        else:
            sig[name] = "i32"
    constexprs = {"BLOCK_M": block_m, "BLOCK_N": cfg.block_n, "FINAL": False}
    aligned = [
        i
        for i, n in enumerate(names)
        if n in ("Q", "K", "V", "Out", "Lse") or n.startswith("stride_")
    ]
    attrs = {(i,): [["tt.divisibility", 16]] for i in aligned}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    k = triton.compile(
        src,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
    )
    return k.metadata.shared


def main() -> None:
    rows, under, false_admit = 0, 0, 0
    for d, causal in itertools.product((64, 128, 256), (False, True)):
        spec = KernelSpec(d, causal, "bfloat16")
        for bn, w, s in itertools.product(hw.BLOCK_N_CHOICES, (4,), hw.STAGE_CHOICES):
            cfg = hw.DecodeConfig(bn, w, s, 8)
            model = hw.smem_bytes(d, "bfloat16", cfg, 16)
            try:
                real = compile_bytes(spec, cfg, 16)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(f"d{d} causal={causal} {cfg.short()}: compile failed {type(exc).__name__}")
                continue
            rows += 1
            under += model < real
            false_admit += model <= LIMIT < real
            print(
                f"d{d} causal={causal} {cfg.short()}: model {model} compiler {real}"
                f"{'  UNDER' if model < real else ''}",
                flush=True,
            )
    print(f"{rows} configs, model below compiler {under}, false admits {false_admit}")


if __name__ == "__main__":
    main()
