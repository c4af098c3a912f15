"""Session 51: what attention sinks cost (`flashgen.attention(sinks=)`: the kernels' output
rescaled on the composite op, one more pass over it) against the same call without sinks, SDPA
without sinks, and GPT-OSS's eager attention with them (the scores materialised, what HF runs).
GPT-OSS-like shapes (64 query heads, 8 kv heads, head dim 64, bf16, causal and a 128-key
window), forward and forward+backward, do_bench medians; the outputs checked against float32
eager first. Usage: python sinks_time.py OUT.json"""

import json
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

sys.path.insert(0, ".")
import flashgen  # noqa: E402


def eager(q, k, v, sinks, window=None):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    n = s.shape[-1]
    i, j = torch.arange(n, device=q.device)[:, None], torch.arange(n, device=q.device)[None, :]
    hidden = (j > i) if window is None else (j > i) | (j <= i - window)
    s = s.masked_fill(hidden, float("-inf"))
    col = sinks.reshape(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1).to(s.dtype)
    both = torch.cat([s, col], -1)
    return torch.softmax(both - both.max(-1, keepdim=True).values, -1)[..., :-1] @ v


def measure(b, n, window) -> dict:
    """One shape's readings (ms) and the error against float32 eager."""
    q = torch.randn(b, 64, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k, v = (
        torch.randn(b, 8, n, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(2)
    )
    sinks = torch.randn(64, device="cuda", requires_grad=True)
    do = torch.randn_like(q)
    kw = {"causal": True, "window": window}
    want = eager(q.float(), k.float(), v.float(), sinks, window)
    got = flashgen.attention(q, k, v, sinks=sinks, **kw)
    row = {"shape": [b, 64, 8, n, 64], "window": window}
    row["err"] = (got.float() - want).abs().max().item()
    runs = {
        "flashgen_sinks": lambda: flashgen.attention(q, k, v, sinks=sinks, **kw),
        "flashgen": lambda: flashgen.attention(q, k, v, **kw),
        "eager_sinks": lambda: eager(q, k, v, sinks, window),
    }
    if window is None:
        runs["sdpa"] = lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        )
    for name, fn in runs.items():
        leaves = [q, k, v, sinks] if "sinks" in name else [q, k, v]
        try:
            with torch.no_grad():
                row[f"{name} fwd"] = do_bench(fn, return_mode="median")
            row[f"{name} fwd_bwd"] = do_bench(
                lambda fn=fn, leaves=leaves: torch.autograd.grad(fn(), leaves, do),
                return_mode="median",
            )
        except torch.OutOfMemoryError:
            row[f"{name} fwd"] = "oom"
    return row


def main(path):
    rows = []
    for b, n, window in ((2, 2048, None), (2, 2048, 128), (1, 8192, None), (1, 8192, 128)):
        rows.append(measure(b, n, window))
        print(json.dumps(rows[-1]), flush=True)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
