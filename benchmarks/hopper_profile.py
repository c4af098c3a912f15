"""Launch the Hopper Gluon forward (and, for comparison, SDPA's cuDNN kernel) once per named
case, for Nsight Compute to profile; also print the compiled kernels' registers and spills.

Why: the family stops short of cuDNN on short/causal shapes and of 650 TFLOP/s at hd128 16k;
the profile says whether issue rate, stalls, registers or spills limit it. Each case launches
its kernel exactly once after the inputs exist, so `ncu -k regex:'attn_fwd_ws|sdpa|fmha|cudnn'`
catches one launch per case (cuDNN's may come with helper kernels; the regex names them).

Usage (RESULTS.md, "Hopper forward: profile"):
  ncu --clock-control none --set full -k regex:'attn_fwd_ws|sdpa|fmha|cudnn' -c 8 -o REPORT \
      python3 benchmarks/hopper_profile.py run d128_16k d128_1k_causal cudnn_d128_16k
  python3 benchmarks/hopper_profile.py regs > regs.json   # n_regs / n_spills / shared per config
Case names: [cudnn_]d{64,128}_{1k,4k,16k}[_causal][_gqa]; add `_persistent` for the
persistent-grid variant where the family has it (flashgen.kernels.hopper), `_shipped` for the
config the run time picks (`hopper.config_for`: the shipped records, tail_split included, and
its split launch with the merge; ncu's regex still catches only the attention kernel),
`_alibi` for the ALiBi kernel (the standard slopes; flashgen's only): at head dim 64 it ran
0.65x the unmasked kernel (benchmarks/RESULTS.md, session 22 B4) while its SASS has ~17% more
instructions.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))

from flashgen.bench import harness, scripts  # noqa: E402

# batch, q heads, kv heads for a sequence length: the grid of RESULTS.md (batch x heads fill the GPU).
_BATCH = {1024: 16, 4096: 4, 16384: 1}
_CASE = re.compile(
    r"^(cudnn_)?d(64|128)_(1k|4k|16k)(_causal)?(_gqa)?(_persistent|_shipped)?(_alibi)?$"
)


def parse_case(name: str) -> dict:
    """Case name -> shape; raises ValueError naming the case for anything else."""
    m = _CASE.match(name)
    if not m:
        raise ValueError(f"unknown case {name!r} (expected e.g. d128_16k or cudnn_d64_1k_causal)")
    vendor, dim, n, causal, gqa, grid, alibi = m.groups()
    if vendor and (alibi or grid):
        raise ValueError(f"case {name!r}: ALiBi and config cases are flashgen's kernel only")
    seq = {"1k": 1024, "4k": 4096, "16k": 16384}[n]
    heads = 16 if dim == "128" else 32
    if gqa:
        heads, kv_heads = 32, 8
    else:
        kv_heads = heads
    return dict(vendor=bool(vendor), head_dim=int(dim), seq=seq, batch=_BATCH[seq], heads=heads,
                kv_heads=kv_heads, causal=bool(causal), persistent=grid == "_persistent",
                shipped=grid == "_shipped", alibi=bool(alibi))  # fmt: skip


def run_case(name: str) -> None:
    import torch

    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper

    c = parse_case(name)
    shape_q = (c["batch"], c["heads"], c["seq"], c["head_dim"])
    q, k, v = scripts.inputs(c["batch"], c["heads"], c["kv_heads"], c["seq"], c["seq"],
                             c["head_dim"], count=3)  # fmt: skip
    if c["vendor"]:
        harness.sdpa("sdpa_cudnn", q, k, v, causal=c["causal"])
    else:
        spec = KernelSpec(c["head_dim"], c["causal"], "bfloat16", "fwd", alibi=c["alibi"])
        slopes = None
        if c["alibi"]:
            from flashgen.kernels.alibi import standard_slopes

            slopes = standard_slopes(c["heads"]).cuda().expand(c["batch"], c["heads"])
        out = torch.empty_like(q)
        lse = torch.empty(shape_q[:3], device="cuda", dtype=torch.float32)
        cfg = hopper.CONFIGS[c["head_dim"]]
        if c["persistent"]:
            cfg = hopper.persistent_variant(cfg)
        if c["shipped"]:
            cfg = hopper.config_for(spec, c["seq"])
        hopper.forward(q, k, v, out, lse, scale=c["head_dim"] ** -0.5, spec=spec, config=cfg,
                       alibi=slopes)  # fmt: skip
    torch.cuda.synchronize()
    print(f"{name}: launched {c}", flush=True)


def regs() -> None:
    """Registers, spills and shared bytes of each shipped config as compiled on this GPU."""
    import torch

    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper
    from flashgen.kernels.codegen import load_family

    rows, seen = [], set()
    for dim, cfg0 in hopper.CONFIGS.items():
        variants = [cfg0]
        if hasattr(hopper, "persistent_variant"):
            variants.append(hopper.persistent_variant(cfg0))
        for causal in (False, True):
            for cfg in variants:
                spec = KernelSpec(dim, causal, "bfloat16", "fwd")
                q = torch.randn(1, 1, 256, dim, device="cuda", dtype=torch.bfloat16)
                out, lse = torch.empty_like(q), torch.empty(1, 1, 256, device="cuda")
                hopper.forward(q, q, q, out, lse, scale=dim**-0.5, spec=spec, config=cfg)
                torch.cuda.synchronize()
                fn = load_family(spec, "hopper").attn_fwd_ws
                for key, kernels in fn.device_caches[0][0].items():
                    if (spec, key) in seen:
                        continue
                    seen.add((spec, key))
                    kernels._init_handles()
                    rows.append(dict(head_dim=dim, causal=causal, cfg=repr(cfg),
                                     n_regs=kernels.n_regs, n_spills=kernels.n_spills,
                                     shared=kernels.metadata.shared,
                                     model_shared=cfg.shared_bytes(dim)))  # fmt: skip
    print(json.dumps(rows, indent=1), flush=True)


def main(argv=None) -> None:
    ap = scripts.parser(__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="launch each named case once (for ncu)")
    r.add_argument("cases", nargs="+")
    sub.add_parser("regs", help="print registers/spills/shared bytes of the shipped configs")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        for name in args.cases:
            parse_case(name)  # every name checked before the first launch
        for name in args.cases:
            run_case(name)
    else:
        regs()


if __name__ == "__main__":
    main()
