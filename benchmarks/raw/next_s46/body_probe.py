"""Session 46: where flashgen's backward body spends its time on the engine's device thread
against the calling thread (bwd_thread.py read it ~24 µs longer there on an H100).

Spans inside `_PlainAttention.backward` (re-written here with timestamps, same calls): unpack
(ctx.saved_tensors), check (plain_eager), plain_backward, of which plan.launch (`_Plan.launch`:
allocations and launches), of which kernel launches (`Launch.__call__`); leave (the backward's
return to autograd.grad's); total (autograd.grad). Medians over 5 rounds of 300 (a first round
dropped), threads on and off. Usage: python body_probe.py OUT.json
"""

import json
import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
import flashgen  # noqa: E402
from flashgen.kernels import bwd, fwd, launch  # noqa: E402
from flashgen.runtime import autograd as fg_autograd  # noqa: E402
from flashgen.runtime.eager import plain_eager  # noqa: E402
from flashgen.runtime.primitives import plain_backward  # noqa: E402

pc = time.perf_counter
cur: dict[str, float] = {}


def mark(name, dt):
    cur[name] = cur.get(name, 0.0) + dt


def timed(fn, name):
    def wrapper(*args, **kwargs):
        t = pc()
        result = fn(*args, **kwargs)
        mark(name, pc() - t)
        return result

    return wrapper


bwd._Plan.launch = timed(bwd._Plan.launch, "plan.launch")
launch.Launch.__call__ = timed(launch.Launch.__call__, "kernel launches")


def backward(ctx, dout):
    t0 = pc()
    q, k, v, out, lse = ctx.saved_tensors
    t1 = pc()
    needs = ctx.needs_input_grad[:3]
    plain_eager(dout)
    t2 = pc()
    dq, dk, dv = plain_backward(
        dout, q, k, v, out, lse, ctx.causal, ctx.scale, needs, ctx.deterministic
    )
    t3 = pc()
    mark("unpack", t1 - t0)
    mark("check", t2 - t1)
    mark("plain_backward", t3 - t2)
    cur["_end"] = pc()
    return dq, dk, dv, None, None, None, None


fg_autograd._PlainAttention.backward = staticmethod(backward)


def main(path):
    b, h, s, d = 1, 1, 128, 64
    qg, kg, vg = (
        torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    do = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    res: dict = {}
    for rnd in range(6):
        for mode, on in (("threads", True), ("calling", False)):
            rows = []
            with torch.autograd.set_multithreading_enabled(on):
                torch.cuda.synchronize()
                for _ in range(300):
                    out = flashgen.attention(qg, kg, vg, impl="flashgen")
                    cur.clear()
                    t0 = pc()
                    torch.autograd.grad(out, (qg, kg, vg), do)
                    t1 = pc()
                    cur["leave"] = t1 - cur.pop("_end")
                    cur["total"] = t1 - t0
                    rows.append(dict(cur))
                torch.cuda.synchronize()
            if rnd == 0:
                continue
            for key in rows[0]:
                per = res.setdefault(mode, {}).setdefault(key, [])
                per.append(statistics.median(r.get(key, 0.0) for r in rows) * 1e6)
    table = {m: {k: round(statistics.median(v), 2) for k, v in p.items()} for m, p in res.items()}
    for mode, parts in table.items():
        print(mode, "  ".join(f"{k} {v}" for k, v in parts.items()))
    # the same backward on the calling thread without autograd
    q, k, v = (t.detach() for t in (qg, kg, vg))
    o, lse = fwd.forward(q, k, v, causal=False, scale=d**-0.5)

    def direct():
        plain_backward(do, q, k, v, o, lse, False, d**-0.5, (True, True, True), False)

    for _ in range(50):
        direct()
    torch.cuda.synchronize()
    xs = []
    for _ in range(5):
        t = pc()
        for _ in range(300):
            direct()
        xs.append((pc() - t) / 300 * 1e6)
        torch.cuda.synchronize()
    print("plain_backward on the calling thread, no autograd:", round(statistics.median(xs), 2))
    with open(path, "w") as f:
        json.dump({"table": table, "direct_us": statistics.median(xs)}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
