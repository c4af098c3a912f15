"""Session 55: why a flashgen forward+backward through autograd costs more host time with the
engine's device thread (BERT's masked site, H100: 585 µs a call against 332 with
`torch.autograd.set_multithreading_enabled(False)`; SDPA 515 / 464, GPU-bound there).

Host µs a call (launch-bound 1x1x128x64 bf16 and BERT's masked site B8 H12 N512 d64; 200 calls,
median of 5 rounds), multithreaded engine / single thread, for: flashgen's plain call, flashgen
with HF's [B, 1, N, N] key-padding view, SDPA, an identity Python autograd.Function, and
flashgen with its autograd node's backward timed from inside (perf_counter around the node's
body: the Python our backward runs, on whichever thread the engine gives it).

Usage: python engine_probe.py OUT.json"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
import flashgen  # noqa: E402
from flashgen.runtime import autograd as fg_autograd  # noqa: E402


def host_us(fn, calls=200, rounds=5):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    xs = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        xs.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return round(statistics.median(xs), 1)


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q):
        return q.clone()

    @staticmethod
    def backward(ctx, g):
        return g


INSIDE = {"n": 0, "s": 0.0}


def timed_backward(orig):
    def backward(ctx, dout):
        t = time.perf_counter()
        r = orig(ctx, dout)
        INSIDE["s"] += time.perf_counter() - t
        INSIDE["n"] += 1
        return r

    return backward


def grad_of(fn, wrt, do):
    return lambda: torch.autograd.grad(fn(), wrt, do)


def make_cases(q, k, v, mask):
    return {
        "flashgen": lambda: flashgen.attention(q, k, v, attn_mask=mask, impl="flashgen"),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "identity": lambda: Identity.apply(q),
    }


def main():
    res = {}
    for label, (b, h, s, d, masked) in {
        "tiny": (1, 1, 128, 64, False),
        "bert_plain": (8, 12, 512, 64, False),
        "bert_mask": (8, 12, 512, 64, True),
    }.items():
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))  # fmt: skip
        do = torch.randn_like(q)
        mask = None
        if masked:
            keep = torch.arange(s, device="cuda")[None, :] < torch.tensor(
                [s - 37 * i for i in range(b)], device="cuda")[:, None]  # fmt: skip
            mask = keep[:, None, None, :].expand(b, 1, s, s)
        cases = make_cases(q, k, v, mask)
        row = {}
        for name, fn in cases.items():
            wrt = (q,) if name == "identity" else (q, k, v)
            for mt in (True, False):
                with torch.autograd.set_multithreading_enabled(mt):
                    row[f"{name}_{'mt' if mt else '1t'}"] = host_us(grad_of(fn, wrt, do))
        # our node's body timed from inside, both engine modes
        node = fg_autograd._Attention if masked else fg_autograd._PlainAttention
        orig = node.backward
        node.backward = staticmethod(timed_backward(orig))
        try:
            for mt in (True, False):
                INSIDE.update(n=0, s=0.0)
                with torch.autograd.set_multithreading_enabled(mt):
                    row[f"flashgen_{'mt' if mt else '1t'}_again"] = host_us(
                        grad_of(cases["flashgen"], (q, k, v), do)
                    )
                row[f"inside_{'mt' if mt else '1t'}"] = round(
                    INSIDE["s"] / max(INSIDE["n"], 1) * 1e6, 1
                )
        finally:
            node.backward = orig
        res[label] = row
        print(label, row, flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
