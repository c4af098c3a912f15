"""The Hopper forward with half its exp2 on the FMA units (EXP_EMU) against the MUFU-only kernel,
in one process, alternating (H200).

The template's EXP2_PAIR computes every second score's exp2 with a cubic and exponent bits
instead of ex2.approx: the MUFU unit (16 ops a clock an SM) also serves softcap's tanh, so a
softcapped tile needs two MUFU ops a score. This script checks both kernels' out and lse
against a float64 reference (random bf16 inputs, softcap 50 and a small cap 5 where tanh
bends the scores) and times them alternately, `--rounds` readings each, over the shapes below
(plain causal and non-causal, softcap, head dims 64 and 128), with cuDNN's forward of the
same shape where SDPA has it (no softcap). JSON lines to stdout and `--out`.

    python benchmarks/exp_emu.py [--rounds 3] [--only NAME,...] [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name: (batch, heads, seq, head_dim, causal, softcap)
CASES = {
    "d128_16k": (4, 16, 16384, 128, False, None),
    "d128_4k": (16, 16, 4096, 128, False, None),
    "d128_4k_causal": (16, 16, 4096, 128, True, None),
    "d64_4k": (16, 32, 4096, 64, False, None),
    "d64_4k_causal": (16, 32, 4096, 64, True, None),
    "d128_4k_cap": (16, 16, 4096, 128, False, 50.0),
    "d128_4k_causal_cap": (16, 16, 4096, 128, True, 50.0),
    "d64_4k_cap": (16, 32, 4096, 64, False, 50.0),
}


def reference(q, k, v, causal, scale, softcap):
    """float64 out and natural-log lse of the first batch entry (enough to catch a wrong exp)."""
    import torch

    q, k, v = (t[:1].double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1)
    return torch.softmax(s, -1) @ v, lse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep", type=int, default=40, help="do_bench rep in ms")
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    import torch

    from flashgen.bench import harness, scripts
    from flashgen.core.spec import KernelSpec
    from flashgen.kernels import hopper
    from flashgen.kernels.launch import direct_device

    names = [n for n in args.only.split(",") if n] or list(CASES)
    time_fn = scripts.timer("cuda", args.rep)
    print(scripts.banner(harness.run_meta("cuda")), flush=True)
    for name in names:
        b, h, n, d, causal, softcap = CASES[name]
        spec = KernelSpec(d, causal, "bfloat16", "fwd", softcap=softcap is not None)
        q, k, v = scripts.inputs(b, h, h, n, n, d, count=3)
        scale = 1.0 / math.sqrt(d)
        cfg = hopper.config_for(spec, n)
        row = {"name": name, "b": b, "h": h, "n": n, "d": d, "causal": causal,
               "softcap": softcap, "config": repr(cfg)}  # fmt: skip
        runs = {}
        for emu in (False, True):
            o = torch.empty_like(q)
            lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
            run = hopper.plan(spec, cfg, q, k, v, o, direct_device(q, True), exp_emu=emu)
            a = hopper.call_args(spec, q, k, v, o, lse, scale, None, softcap, None, None)
            runs[emu] = lambda run=run, a=a: run(*a)
            runs[emu]()
            torch.cuda.synchronize()
            # the check: out and lse of batch entry 0 against float64, at the timed softcap and
            # at a small one (5.0) where tanh bends the scores
            caps = [softcap] if softcap is None else [softcap, 5.0]
            for cap in caps:
                if cap != softcap:
                    a2 = hopper.call_args(spec, q, k, v, o, lse, scale, None, cap, None, None)
                    run(*a2)
                ref_o, ref_lse = reference(q, k, v, causal, scale, cap)
                err_o = (o[:1].double() - ref_o).abs().max().item() / ref_o.abs().max().item()
                err_l = lse[:1].double() - ref_lse  # both natural log
                row[f"err_out_emu{int(emu)}_cap{cap}"] = err_o
                row[f"err_lse_emu{int(emu)}_cap{cap}"] = err_l.abs().max().item()
                row[f"nan_emu{int(emu)}_cap{cap}"] = bool(torch.isnan(o).any().item())
        flops = harness.attention_flops(b, h, n, n, d, causal)
        readings = {False: [], True: []}
        for _ in range(args.rounds):
            for emu in (False, True):
                readings[emu].append(time_fn(runs[emu]))
        for emu in (False, True):
            ms = statistics.median(readings[emu])
            row[f"emu{int(emu)}_ms"] = ms
            row[f"emu{int(emu)}_tflops"] = scripts.tflops(flops, ms)
            row[f"emu{int(emu)}_readings"] = readings[emu]
        row["speedup_emu"] = row["emu0_ms"] / row["emu1_ms"]
        if softcap is None:
            base = scripts.sdpa_baselines(q, k, v, causal=causal, time_fn=time_fn,
                                          impls=("sdpa_cudnn",))  # fmt: skip
            ms = base["sdpa_cudnn"]
            row["cudnn_ms"] = ms
            if not isinstance(ms, str):
                row["cudnn_tflops"] = scripts.tflops(flops, ms)
        line = json.dumps(row)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(line + "\n")
        del q, k, v, runs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
