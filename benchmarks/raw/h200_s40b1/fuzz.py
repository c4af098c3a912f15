"""Random attention calls through `flashgen.attention` against a float64 reference, forward and
gradients: shapes (odd lengths, GQA, head dims 16-64, bhsd and bshd layouts), dtypes, causal
alignment, windows, softcaps, boolean / additive (learned too) / key-padding masks, ALiBi, key
lengths; with `dropout`, attention dropout at p = 0.1-0.5 too (the reference applies the keep
mask the call drew: `flashgen.kernels.dropout.keep_mask` of the seed the same generator state
gives). Calls the op refuses (ValueError) are counted, not failed.
  python3 fuzz.py N SEED [cpu|cuda] [dropout]   (cpu: Triton's interpreter; longer on cuda)
Session 39's CPU runs: benchmarks/RESULTS.md, "CPU correctness sweep". (Session 41: a line for
every passing call too, so a run cut short by its time limit still says how far it got.)"""

import math
import os
import random
import sys
import traceback

DEVICE = sys.argv[3] if len(sys.argv) > 3 else "cpu"
DROPOUT = "dropout" in sys.argv[4:]
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
import torch  # noqa: E402

import flashgen  # noqa: E402
from flashgen.kernels import dropout  # noqa: E402

torch.set_num_threads(1)
SCALE = 16 if DEVICE == "cuda" else 1  # longer sequences on the GPU (its kernels' real tiles)


def ref(q, k, v, causal, window, softcap, mask, slopes, klen, scale, shift=0, keep=None, p=0.0):
    """float64 attention; a row that sees no key gives zeros. `keep` (with `p`): dropout's
    keep mask, the kept probabilities scaled by 1 / (1 - p)."""
    b, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    g = hq // hk
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) * scale
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    i0 = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    i = i0 + shift  # bottom-right causal alignment: query i sits at key position i + sk - sq
    if slopes is not None:
        s = s + slopes.double()[None, :, None, None] * (j - i0)
    vis = torch.ones(b, hq, sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        vis &= j <= i
    if window is not None:
        left, right = window
        vis &= (j >= i - left) & (j <= i + right)
    if mask is not None:
        if mask.dtype == torch.bool:
            vis &= mask
        else:
            s = s + mask.double()
            vis &= mask != float("-inf")
    if klen is not None:
        vis &= j < klen[:, None, None, None]
    s = s.masked_fill(~vis, float("-inf"))
    probs = torch.softmax(s, -1).nan_to_num(0.0)
    if keep is not None:
        probs = probs * keep.double() / (1 - p)
    return probs @ vd


def case(rng):
    b = rng.choice([1, 2])
    hk = rng.choice([1, 2])
    hq = hk * rng.choice([1, 2])
    sq = rng.choice([1, 5, 17, 33, 64, 70]) * SCALE
    sk = rng.choice([sq, 1, 9 * SCALE, 40 * SCALE, 65 * SCALE]) if rng.random() < 0.5 else sq
    d = rng.choice([16, 32, 40, 64] if DEVICE == "cpu" else [64, 128, 64, 128, 80])
    causal = rng.random() < 0.4
    window = None
    if rng.random() < 0.25:
        window = (rng.choice([0, 3, 8, 30]), 0 if causal else rng.choice([0, 2, 16]))
    softcap = rng.choice([None, None, 5.0, 30.0])
    mask = None
    mk = rng.random()
    if mk < 0.2:
        mask = torch.rand(b, 1, sq, sk) > 0.3
        mask[..., 0] = True
    elif mk < 0.35:
        mask = torch.randn(1, hq, sq, sk)
    elif mk < 0.45:
        mask = torch.rand(b, 1, 1, sk) > 0.2
        mask[..., 0] = True
    slopes = torch.rand(hq) * 0.5 if rng.random() < 0.2 else None
    klen = None
    if rng.random() < 0.2 and mask is None:
        klen = torch.tensor([rng.randint(1, sk) for _ in range(b)])
    return b, hq, hk, sq, sk, d, causal, window, softcap, mask, slopes, klen


def extras(rng):
    return dict(
        layout=rng.choice(["bhsd", "bshd"]),
        dtype=rng.choice([torch.float32, torch.float32, torch.bfloat16, torch.float16]),
        bias_grad=rng.random() < 0.3,
        align=rng.choice(["top_left", "top_left", "bottom_right"]),
    )


def _leaf(b, h, s, d, dt, layout, gen):
    """A random [B, H, S, D] leaf in dtype `dt`, stored as [B, S, H, D] for layout bshd."""
    if layout == "bshd":
        t = torch.randn(b, s, h, d, generator=gen).to(dt).transpose(1, 2)
    else:
        t = torch.randn(b, h, s, d, generator=gen).to(dt)
    return t.requires_grad_()


def main(n, seed):
    rng = random.Random(seed)
    bad = ok = refused = 0
    for t in range(n):
        b, hq, hk, sq, sk, d, causal, window, softcap, mask, slopes, klen = case(rng)
        ex = extras(rng)
        if ex["align"] == "bottom_right" and (not causal or DROPOUT):
            ex["align"] = "top_left"
        drop_p = rng.choice([0.1, 0.3, 0.5]) if DROPOUT else 0.0
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
            mask=None if mask is None else (mask.dtype, tuple(mask.shape)),
            alibi=slopes is not None,
            klen=None if klen is None else klen.tolist(),
            p=drop_p,
            **ex,
        )
        gen = torch.Generator().manual_seed(t)
        dt = ex["dtype"]
        q, k, v = (
            _leaf(b, h, s_, d, dt, ex["layout"], gen) for h, s_ in ((hq, sq), (hk, sk), (hk, sk))
        )
        if DEVICE == "cuda":
            q, k, v = (x.detach().cuda().requires_grad_() for x in (q, k, v))
            mask, slopes, klen = (None if x is None else x.cuda() for x in (mask, slopes, klen))
        if mask is not None and mask.dtype != torch.bool:
            mask = mask.to(dt)
            if ex["bias_grad"]:
                mask = mask.clone().requires_grad_()
        scale = 1 / math.sqrt(d)
        try:
            torch.manual_seed(1000 + t)  # the dropout seed's generator state, drawn again below
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
                causal_align=ex["align"],
                dropout_p=drop_p,
            )
        except (ValueError, NotImplementedError) as exc:
            refused += 1
            print("refused", desc, str(exc).splitlines()[0][:150], flush=True)
            continue
        except Exception:
            bad += 1
            print("ERROR", desc, traceback.format_exc()[-800:], flush=True)
            continue
        qd, kd, vd = (t_.detach().double().requires_grad_() for t_ in (q, k, v))
        md = mask
        leaves_got = (q, k, v)
        if mask is not None and mask.requires_grad:
            md = mask.detach().double().requires_grad_()
            leaves_got = (q, k, v, mask)
        shift = sk - sq if ex["align"] == "bottom_right" else 0
        keep = None
        if DROPOUT:
            torch.manual_seed(1000 + t)
            seed = int(dropout.new_seed().item())
            keep = dropout.keep_mask(seed, drop_p, b, hq, sq, sk, q.device)
        want = ref(
            qd, kd, vd, causal, window, softcap, md, slopes, klen, scale, shift, keep, drop_p
        )
        err = (out.double() - want).abs().max().item()
        do = torch.randn(out.shape, generator=gen).to(out.device)
        got = torch.autograd.grad(out, leaves_got, do.to(out.dtype))
        wants = torch.autograd.grad(
            want, (qd, kd, vd) + ((md,) if len(leaves_got) == 4 else ()), do.double()
        )
        gerr = max((g.double() - w).abs().max().item() for g, w in zip(got, wants, strict=True))
        lo = dt != torch.float32
        tol = (3e-2 if lo else 2e-4) * max(1.0, want.abs().max().item())
        gtol = (6e-2 if lo else 2e-3) * max(1.0, max(w.abs().max().item() for w in wants))
        if not (err <= tol and gerr <= gtol) or not torch.isfinite(out).all():
            bad += 1
            print("MISMATCH", desc, f"out {err:.2e} grads {gerr:.2e}", flush=True)
        else:
            ok += 1
            print("ok", desc, f"out {err:.1e} grads {gerr:.1e}", flush=True)
    print(f"done ok={ok} bad={bad} refused={refused}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
