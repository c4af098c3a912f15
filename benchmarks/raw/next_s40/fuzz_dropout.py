"""fuzz.py's random calls with attention dropout (p = 0.1-0.5) on the CPU (Triton's
interpreter): forward and gradients against float64 with the keep mask the call drew
(`flashgen.kernels.dropout.keep_mask` of the seed the same generator state gives).
  python3 fuzz_dropout.py N SEED
Session 39: seeds 21 and 22, 50 calls each, 100 passed."""

import math
import os
import random
import sys
import traceback

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from fuzz import case  # noqa: E402

import flashgen  # noqa: E402
from flashgen.kernels import dropout  # noqa: E402

torch.set_num_threads(1)


def main(n, seed):
    rng = random.Random(seed)
    ok = bad = refused = 0
    for t in range(n):
        b, hq, hk, sq, sk, d, causal, window, softcap, mask, slopes, klen = case(rng)
        p = rng.choice([0.1, 0.3, 0.5])
        gen = torch.Generator().manual_seed(t)
        q, k, v = (
            torch.randn(b, h, s_, d, generator=gen, requires_grad=True)
            for h, s_ in ((hq, sq), (hk, sk), (hk, sk))
        )
        desc = dict(
            b=b,
            hq=hq,
            hk=hk,
            sq=sq,
            sk=sk,
            d=d,
            causal=causal,
            window=window,
            softcap=softcap,
            p=p,
            mask=None if mask is None else (mask.dtype, tuple(mask.shape)),
            alibi=slopes is not None,
            klen=klen,
        )
        try:
            torch.manual_seed(100 + t)
            out = flashgen.attention(
                q,
                k,
                v,
                causal=causal,
                window=window,
                softcap=softcap,
                attn_mask=mask,
                alibi_slopes=slopes,
                key_lengths=klen,
                dropout_p=p,
            )
        except (ValueError, NotImplementedError) as exc:
            refused += 1
            print("refused", desc, str(exc)[:120], flush=True)
            continue
        except Exception:
            bad += 1
            print("ERROR", desc, traceback.format_exc()[-600:], flush=True)
            continue
        torch.manual_seed(100 + t)
        s = int(dropout.new_seed().item())
        keep = dropout.keep_mask(s, p, b, hq, sq, sk, "cpu").double()
        qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
        g = hq // hk
        kk, vv = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
        sc = qd @ kk.transpose(-1, -2) / math.sqrt(d)
        if softcap is not None:
            sc = softcap * torch.tanh(sc / softcap)
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        if slopes is not None:
            sc = sc + slopes.double()[None, :, None, None] * (j - i)
        vis = torch.ones(b, hq, sq, sk, dtype=torch.bool)
        if causal:
            vis &= j <= i
        if window is not None:
            vis &= (j >= i - window[0]) & (j <= i + window[1])
        if mask is not None:
            if mask.dtype == torch.bool:
                vis &= mask
            else:
                sc = sc + mask.double()
        if klen is not None:
            vis &= j < klen[:, None, None, None]
        sc = sc.masked_fill(~vis, float("-inf"))
        P = torch.softmax(sc, -1).nan_to_num(0.0)
        want = (P * keep / (1 - p)) @ vv
        err = (out.double() - want).abs().max().item()
        do = torch.randn(out.shape, generator=gen)
        got = torch.autograd.grad(out, (q, k, v), do)
        wants = torch.autograd.grad(want, (qd, kd, vd), do.double())
        gerr = max((a.double() - w).abs().max().item() for a, w in zip(got, wants, strict=True))
        tol = 2e-4 * max(1.0, want.abs().max().item())
        gtol = 2e-3 * max(1.0, max(w.abs().max().item() for w in wants))
        if err <= tol and gerr <= gtol:
            ok += 1
        else:
            bad += 1
            print("MISMATCH", desc, f"{err:.2e} {gerr:.2e}", flush=True)
    print(f"done ok={ok} bad={bad} refused={refused}", flush=True)


main(int(sys.argv[1]), int(sys.argv[2]))
