"""Session 54: where the masked op's host time goes inside the compiled HF ModernBERT forward
(call 1 read ~140-160 us a call in the model against ~55 us alone). Times the op's parts with
perf_counter wrappers (the op body, the route's key, the key range, the planned launch, each
direct launch, the flat call after 701e4fc; counts of descriptor encodings and prefix misses;
which routes launch flat) while the GPU is held busy, in
the model and alone at the same shape, same process; then torch.profiler's CPU time per op a
forward for both backends. Usage: python mbert_parts.py OUT.json"""

import copy
import json
import sys
import time
from collections import defaultdict

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, ".")
from hf_padded import config, padded_mask  # noqa: E402

import flashgen  # noqa: E402
import flashgen.runtime.primitives  # noqa: E402,F401
from flashgen.kernels import flat, fwd, launch  # noqa: E402
from flashgen.runtime import routes  # noqa: E402

SLEEP = int(2e8)
T = defaultdict(float)
N = defaultdict(int)
ON = {"on": False}


def timed(name, fn):
    def wrapper(*a, **k):
        if not ON["on"]:
            return fn(*a, **k)
        t0 = time.perf_counter()
        r = fn(*a, **k)
        T[name] += time.perf_counter() - t0
        N[name] += 1
        return r

    return wrapper


routes.route_key = timed("route_key", routes.route_key)
routes.find = timed("find", routes.find)
routes.key_hull = timed("key_hull", routes.key_hull)
fwd.launch_planned = timed("launch_planned", fwd.launch_planned)
fwd._Plan.launch = timed("plan.launch", fwd._Plan.launch)
launch.RawLaunch.__call__ = timed("RawLaunch", launch.RawLaunch.__call__)
launch.RawLaunch._expand = timed("expand(prefix miss)", launch.RawLaunch._expand)
launch._encode = timed("encode", launch._encode)
fwd.forward = timed("full path forward", fwd.forward)
# the op's body: wrap the registered kernel through the module global it calls per call
_orig_route_run = routes.Route.run
routes.Route.run = timed("Route.run", _orig_route_run)
flat.FlatLaunch.__call__ = timed("FlatLaunch", flat.FlatLaunch.__call__)  # (after 701e4fc)


def host_us(fn, n):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    T.clear()
    N.clear()
    best = []
    ON["on"] = True
    for _ in range(5):
        torch.cuda._sleep(SLEEP)
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best.append((time.perf_counter() - t0) / n * 1e6)
        torch.cuda.synchronize()
    ON["on"] = False
    calls = 5 * n
    parts = {k: (T[k] / calls * 1e6, N[k] / calls) for k in T}
    return min(best), parts


def main(path):
    import transformers

    res = {}
    torch.manual_seed(0)
    cfg = config("modernbert", 1024, 16, 2, 2048)
    model = transformers.AutoModel.from_config(cfg, attn_implementation="sdpa")
    model = model.to("cuda", torch.bfloat16).train()
    ids = torch.randint(1, cfg.vocab_size, (4, 2048), device="cuda")
    mask = padded_mask(4, 2048, "right", "cuda")
    x = model.get_input_embeddings()(ids).detach()
    fns = {}
    for name, backend in (
        ("flashgen", flashgen.backend(fallback="inductor")),
        ("inductor", "inductor"),
    ):
        compiled = torch.compile(copy.deepcopy(model), backend=backend)

        def f(compiled=compiled):
            with torch.no_grad():
                return compiled(inputs_embeds=x, attention_mask=mask).last_hidden_state

        for _ in range(3):
            f()
        fns[name] = f
    b, h, n, d = 4, 16, 2048, 64
    q, k, v = (
        torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        for _ in range(3)
    )
    keep = torch.ones(b, n, dtype=torch.bool, device="cuda")
    for i in range(1, b):
        keep[i, n - n * i // (2 * b) :] = False
    mfull = keep[:, None, None, :].expand(b, 1, n, n)
    op = torch.ops.flashgen.attention_fwd
    cases = {
        "alone mask": lambda: op(q, k, v, False, 0.125, None, None, "top_left", None, mfull),
        "alone mask+window": lambda: op(
            q, k, v, False, 0.125, [64, 64], None, "top_left", None, mfull
        ),
        "model flashgen": fns["flashgen"],
        "model inductor": fns["inductor"],
    }
    for r in range(2):
        for label, fn in cases.items():
            reps = 20 if label.startswith("model") else 200
            lo, parts = host_us(fn, reps)
            res.setdefault(label, []).append({"host_us": lo, "parts": parts})
            print(f"round {r} {label:18} host {lo:7.1f} us a call", flush=True)
            for k2, (us, cnt) in sorted(parts.items(), key=lambda kv: -kv[1][0]):
                print(f"    {k2:22} {us:7.1f} us a call  ({cnt:.2f} a call)", flush=True)
    for key, route in routes._routes.items():  # which routes launch flat (701e4fc on)
        plan = fwd._plans.get(route.plan_key)
        family = None if plan is None else ("hopper" if plan.hopper is not None else "portable")
        print(
            f"route q {tuple(key[0])} mask {tuple(key[12])}: flat {route.flat is not None}, "
            f"key range {route.hull}, plan {family}"
        )
    from torch.profiler import ProfilerActivity, profile

    for label in ("flashgen", "inductor"):
        fn = fns[label]
        torch.cuda._sleep(SLEEP)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(10):
                fn()
        torch.cuda.synchronize()
        rows = []
        for e in p.key_averages():
            rows.append((e.key, e.count / 10, e.cpu_time_total / 10, e.self_cpu_time_total / 10))
        rows.sort(key=lambda r: -r[3])
        res["profile " + label] = rows[:40]
        print(f"profile {label}: self CPU us a forward (top 18)")
        for key, cnt, tot, self_ in rows[:18]:
            print(f"    {key[:60]:60} x{cnt:5.1f} total {tot:8.1f} self {self_:8.1f}")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
