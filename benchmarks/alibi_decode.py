"""ALiBi attention over a KV cache (a decode step, a speculative draft) under torch.compile: the
flashgen backend against Inductor, inference (needs CUDA; --smoke checks the script on the CPU).

    python benchmarks/alibi_decode.py --out alibi_decode.json

Hand-written attention the way ALiBi models write it (the ALiBi paper's and MPT's relative form
over a cache): scores plus slope_h * (j - i), i the query's position (the cache's last Tq
positions), causal from the bottom-right diagonal, float32 softmax. The backend proves the
bias ALiBi and the mask bottom-right causal for every length, and the op runs such short
queries on the split-KV decode kernels, which add the bias themselves; Inductor runs its own
code for the eager graph (matmuls and a fused softmax). For each (batch, query rows, cache
length): both outputs checked against float32 eager (flashgen's error at most twice Inductor's
plus 1e-3), then timed in turn for `--rounds` rounds (do_bench medians, L2 flushed), and each
one's host time per call (`harness.host_us`: where a step is launch-bound, that is its time).
A ratio is Inductor's median over flashgen's (> 1: flashgen faster). Exit status 1 when a check
fails or a site was not replaced.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def attention_module(heads: int):
    import torch

    from flashgen.kernels.alibi import standard_slopes

    class AlibiCacheAttention(torch.nn.Module):
        """q [B, H, Tq, D] the newest Tq positions of the cache k, v [B, H, Tk, D]."""

        def __init__(self):
            super().__init__()
            self.register_buffer("slopes", standard_slopes(heads))

        def forward(self, q, k, v):
            tq, tk = q.shape[2], k.shape[2]
            s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
            pos_i = torch.arange(tk - tq, tk, device=q.device)[:, None]
            pos_j = torch.arange(tk, device=q.device)[None, :]
            s = s + self.slopes[:, None, None] * (pos_j - pos_i)
            s = s.masked_fill(pos_j > pos_i, float("-inf"))
            return torch.softmax(s.float(), -1).to(q.dtype) @ v

    return AlibiCacheAttention()


def main(argv: list[str] | None = None) -> int:
    from flashgen.bench.harness import backend_script_args, gpu_or_smoke

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    ap.add_argument("--rows", default="1,4", help="comma-separated query rows (1: a step)")
    ap.add_argument("--caches", default="1024,4096,16384", help="comma-separated cache lengths")
    backend_script_args(ap, rounds=3, rep=20)
    args = ap.parse_args(argv)
    import torch

    cuda = gpu_or_smoke(args.smoke)
    if cuda is None:
        return 2
    if not cuda:
        args.heads, args.head_dim, args.batches, args.caches, args.rounds = 4, 16, "2", "37", 1
    from flashgen.bench.harness import (
        alternate,
        backend_pair,
        gpu_timer,
        host_us,
        rel_err,
        run_meta,
        wall_timer,
    )
    from flashgen.compile import patterns

    def sync():
        if cuda:
            torch.cuda.synchronize()

    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    model = attention_module(args.heads).to(dev)
    timer = gpu_timer(args.rep) if cuda else wall_timer(1)
    report: dict = {"meta": run_meta(dev), "args": vars(args), "rows": []}
    ok = True
    for batch in (int(x) for x in args.batches.split(",")):
        for tq in (int(x) for x in args.rows.split(",")):
            for tk in (int(x) for x in args.caches.split(",")):
                gen = torch.Generator(device=dev).manual_seed(tk + tq)
                q, k, v = (
                    torch.randn(batch, args.heads, t, args.head_dim, generator=gen, device=dev)
                    for t in (tq, tk, tk)
                )
                want = model(q, k, v)
                q, k, v = (t.to(dtype) for t in (q, k, v))
                torch._dynamo.reset()
                before = patterns.replaced_total()
                runs = backend_pair(model, cuda)
                err = {}
                with torch.no_grad():
                    for name, fn in runs.items():
                        err[name] = rel_err(fn(q, k, v), want)
                replaced = patterns.replaced_total() - before
                row_ok = replaced > 0 and err["flashgen"] <= 2 * err["inductor"] + 1e-3
                ok &= row_ok

                def forward(fn, q=q, k=k, v=v):
                    def run():
                        with torch.no_grad():
                            return fn(q, k, v)

                    return run

                timed = alternate(runs, {"fwd": forward}, timer, args.rounds)
                ind, ours = timed["ms"]["fwd", "inductor"], timed["ms"]["fwd", "flashgen"]
                # (a smoke run: one call, the interpreter's seconds mean nothing)
                reps = (200, 5) if cuda else (1, 1)
                host = {
                    name: host_us(forward(fn), calls=reps[0], rounds=reps[1], sync=sync)
                    for name, fn in runs.items()
                }
                row = {
                    "batch": batch, "rows": tq, "cache": tk, "inductor_ms": round(ind, 4),
                    "flashgen_ms": round(ours, 4), "ratio": round(ind / ours, 3),
                    "paired": round(timed["paired"]["fwd", "flashgen"], 3),
                    "readings": {f"{m} {n}": r for (m, n), r in timed["readings"].items()},
                    "err": err, "replaced": replaced, "ok": row_ok, "host_us": host,
                }  # fmt: skip
                report["rows"].append(row)
                print(
                    f"B{batch} rows {tq} cache {tk}: inductor {ind:.4f} ms flashgen {ours:.4f} ms "
                    f"ratio {ind / ours:.3f}x (paired {row['paired']:.3f}x) replaced {replaced} "
                    f"err {err['flashgen']:.2e} / {err['inductor']:.2e} ok={row_ok} host µs "
                    f"{host['inductor']:.1f} / {host['flashgen']:.1f}",
                    flush=True,
                )
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
