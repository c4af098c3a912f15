"""Masked attention on the GPU (issue 16): bf16 against float64, then speed.

    python benchmarks/masks.py [--out FILE.csv] [--budget SECONDS] [--only NAME,...]
                               [--dirs fwd,fwd+bwd] [--rounds N] [--no-check] [--warm]
                               [--bwd-kinds hopper,split] [--windows W,...]

1. Correctness: every mask kind the kernels take (sliding window causal and two-sided, softcap,
   ALiBi slopes, and key/query padding when this checkout has it), forward and backward in bf16 through
   `flashgen.attention`, against a float64 reference built with a dense mask; rows that see no
   key must be zeros (never NaN). Max abs errors relative to the reference's largest entry
   printed; tolerance 2e-2 (bf16).
2. Speed (triton.testing.do_bench, median, L2 flushed): forward and forward+backward of each
   masked variant next to (a) the unmasked kernel of the same causality on the same shape and
   (b) SDPA given the equivalent dense boolean `attn_mask` (the backend PyTorch picks; for
   ALiBi the dense bias slope * (j - i), -inf above the diagonal when causal). TFLOP/s
   are counted on the work the mask leaves (visible query-key pairs: 4*D per pair forward,
   10*D forward+backward), so a masked kernel that skips the masked tiles well has about the
   unmasked kernel's TFLOP/s. `ratio_vs_plain` = masked TFLOP/s / unmasked TFLOP/s (bar >= 0.9);
   `speedup_vs_sdpa` = SDPA time / flashgen time (bar >= 1.5). For the key/query padding rows
   (`pad_*`) also `ratio_vs_unpadded`: the masked TFLOP/s over the unmasked kernel's on the
   same sequences without their padding (each batch element's valid part as its own batch-1
   call, the calls' times summed: `unpadded_ms`). `ratio_vs_plain` compares with one unmasked
   call at the full length, whose TFLOP/s a causal kernel reaches only at that length (a
   shorter causal sequence has more of its tiles on the diagonal), so it also counts what
   shorter sequences cost any kernel; `ratio_vs_unpadded` counts only what the padding costs.

The masked and the unmasked kernel are timed alternately, `--rounds` readings each (3), and
their medians give the ratio; every reading is printed (`readings` lines).
Rows are printed and appended to the CSV as they are measured (a run stopped by its time limit
keeps what it measured). Beside each flashgen timing an `allocator` line gives the caching
allocator's cudaMalloc/cudaFree calls, retries and all-stream syncs during it: a free or a retry
waits for the device, one explanation to rule out when a row reads slower in one process than
in another. Kernels run with their default configs (no tuning database).
`--warm` runs every timed function once and times nothing: started in a parallel process it
fills Triton's cache, so a later timing run does not spend its time limit compiling.
`--bwd-kinds hopper,split` also times each row's forward+backward under each named backward kind
(FLASHGEN_BWD_KIND), alternating, `--rounds` readings each, in this process (`kinds` lines):
the A/B that decides `hopper_bwd.AUTO_EXTRAS` / `AUTO_WINDOW` / `AUTO_SCORE_MODS`, free of the
few-percent spread between processes that made two such runs disagree (session 21 B4-B6).
`--windows 256,4096` adds causal window rows of those sizes (`window_causal_<w>`); every row
carries `tile_frac`, the visible pairs over the pairs of the 128 x 128 tiles that hold one: the
most of the unmasked kernel's TFLOP/s a kernel with 128-row items can reach counted on the
visible pairs (a causal window of w keys: about w / (w + 128)).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

import torch
from torch.nn.functional import scaled_dot_product_attention as sdpa

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import flashgen  # noqa: E402
from flashgen.bench import scripts  # noqa: E402
from flashgen.core.environ import set_env  # noqa: E402
from flashgen.kernels.validate import normalize_window  # noqa: E402

FIELDS = [
    "name", "b", "hq", "hkv", "n", "d", "causal", "mask", "pairs_frac", "dir",
    "flashgen_ms", "plain_ms", "portable_ms", "sdpa_ms", "tflops", "plain_tflops", "ratio_vs_plain",
    "speedup_vs_sdpa", "unpadded_ms", "ratio_vs_unpadded", "tile_frac",
]  # fmt: skip
# The tile edge `tile_frac` counts in: the Hopper forward's 128-row items with 128-key tiles.
TILE = 128


def visible(sq, sk, *, causal, window=None, lengths=None, tensor=None, device="cuda"):
    """Dense boolean mask [B or 1, 1 or H, Sq, Sk] equal to what the kernel computes."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    m = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if causal:
        m &= j <= i
    if window is not None:
        left, right = normalize_window(window, causal)
        m &= (j >= i - left) & (j <= i + right)
    m = m[None, None]
    if lengths is not None:
        (ql, qh), (kl, kh) = lengths  # [B] tensors each: valid ranges [lo, hi)
        qv = (i[None] >= ql[:, None, None]) & (i[None] < qh[:, None, None])
        kv = (j[None] >= kl[:, None, None]) & (j[None] < kh[:, None, None])
        m = m & (qv & kv)[:, None]
    if tensor is not None and tensor.dtype == torch.bool:
        m = m & tensor
    elif tensor is not None and tensor.shape[1] == 1:
        # an additive mask shared by the heads (HF's) hides with -inf or its dtype's minimum;
        # (the per-head biases here, T5-like and ALiBi, hide nothing: the counts stay per head 1)
        m = m & (tensor > torch.finfo(tensor.dtype).min)
    return m


def reference(q, k, v, mask, *, softcap=None, bias=None, keep=None, p=0.0):
    """float64 attention under a dense mask (and an additive bias, and a dropout keep mask of
    rate p); a row that sees nothing gives zeros."""
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if bias is not None:
        s = s + bias.double()
    probs = torch.softmax(s.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    if keep is not None:
        probs = probs * keep / (1 - p)
    return probs @ v


def variants(b, n, hq=16, windows=()):
    """(name, causal, flashgen kwargs, dense-mask kwargs, softcap); `windows`: more causal
    window sizes (rows `window_causal_<w>`, after the fixed ones)."""
    out = [
        ("window_causal_1024", True, {"window": 1024}, {"window": 1024}, None),
        ("window_causal_256", True, {"window": 256}, {"window": 256}, None),
        ("window_2sided_512", False, {"window": (512, 512)}, {"window": (512, 512)}, None),
        ("softcap_causal", True, {"softcap": 50.0}, {}, 50.0),
        ("softcap_full", False, {"softcap": 50.0}, {}, 50.0),
        # a cap past FIXED_MAX's bfloat16 limit (cap * log2(e) <= 80, plans.small_cap): the
        # running max
        ("softcap60_causal", True, {"softcap": 60.0}, {}, 60.0),
        ("softcap60_full", False, {"softcap": 60.0}, {}, 60.0),
        ("dropout_causal", True, {"dropout_p": 0.1}, {}, None),
        ("dropout_full", False, {"dropout_p": 0.1}, {}, None),  # BERT-style fine-tuning
    ]
    named = {row[0] for row in out}
    for w in windows:
        if f"window_causal_{w}" not in named:
            out.append((f"window_causal_{w}", True, {"window": w}, {"window": w}, None))
    out += alibi_variants(n, hq)
    try:
        from flashgen.kernels.padding import bounds  # noqa: F401
    except ImportError:  # a checkout without key padding
        return out
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(n // 4, n + 1, (b,), generator=gen)
    lens[0] = n
    keep = torch.arange(n)[None, :] < lens[:, None]  # the same padding as an attn_mask tensor
    bmask = keep[:, None, None, :].cuda()
    out.append(("attn_mask_bool_pad", False, {"attn_mask": bmask}, {"tensor": bmask}, None))
    # the same padding with causal masking: what the compile backend makes of HF's [B, 1, N, N]
    # mask of a padded decoder batch (`causal & keep`, split into the flag and the key mask)
    out.append(("attn_mask_bool_pad_causal", True, {"attn_mask": bmask}, {"tensor": bmask}, None))
    # a sliding window over a padded batch (Mistral-style with HF's padding mask): the window
    # with the key-padding mask, causal and two-sided
    for wname, causal, win in (("causal_1024", True, 1024), ("2sided_512", False, (512, 512))):
        out.append((f"window_{wname}_boolpad", causal, {"window": win, "attn_mask": bmask},
                    {"window": win, "tensor": bmask}, None))  # fmt: skip
    # the same padding as HF's encoders give it: additive, 0 or bf16's finite minimum
    hidden = torch.finfo(torch.bfloat16).min
    amask = torch.zeros(keep.shape, dtype=torch.bfloat16).masked_fill(~keep, hidden)
    amask = amask[:, None, None, :].cuda()
    out.append(("attn_mask_add_pad", False, {"attn_mask": amask}, {"tensor": amask}, None))
    bias = torch.randn(1, 16, n, n, generator=gen).to("cuda", torch.bfloat16)
    out.append(("attn_mask_bias_causal", True, {"attn_mask": bias}, {"tensor": bias}, None))
    # HF's 4-D mask for a padded decoder batch: causal and key padding in one boolean
    # [B, 1, N, N] tensor, shared by the heads (the kernels get no causal flag)
    tri = torch.ones(n, n, dtype=torch.bool).tril()
    hf4d = (tri[None, None] & keep[:, None, None, :]).cuda()
    out.append(("attn_mask_bool_b1nn", False, {"attn_mask": hf4d}, {"tensor": hf4d}, None))
    for side in ("right", "left"):
        for causal in (False, True):
            kw = {"key_lengths": lens.cuda(), "padding": side}
            if causal:  # a decoder batch: queries padded like the keys
                kw["query_lengths"] = lens.cuda()
            out.append(
                (f"pad_{side}_{'causal' if causal else 'full'}", causal, kw, {"pad": kw}, None)
            )
    return out


def alibi_variants(n, hq=16):
    """ALiBi rows (when this checkout has it): the kernels get the slopes, SDPA the dense bias
    [1, Hq, n, n] in bf16 (as a model would hand it over)."""
    try:
        from flashgen.kernels.alibi import bias_ref, standard_slopes
    except ImportError:
        return []
    slopes = standard_slopes(hq).cuda()
    dense = bias_ref(slopes, n, n).to(torch.bfloat16)
    return [
        (f"alibi_{'causal' if causal else 'full'}", causal, {"alibi_slopes": slopes},
         {"tensor": dense}, None)
        for causal in (True, False)
    ]  # fmt: skip


def dense_kwargs(mk, b, sq, sk):
    pad = mk.pop("pad", None)
    if pad is not None:
        from flashgen.kernels.padding import bounds

        qs, ql, ks, kl = bounds(
            b, sq, sk, pad["key_lengths"], pad.get("query_lengths"), pad["padding"], "cuda"
        ).unbind(1)
        mk["lengths"] = ((qs, qs + ql), (ks, ks + kl))
    return mk


def tile_frac(mask, n: int, tile: int = TILE) -> float:
    """The visible pairs over the pairs of every `tile` x `tile` tile holding one (the tiles a
    kernel with that tiling must run at the least): the most of the unmasked kernel's TFLOP/s a
    mask lets such a kernel reach counted on the visible pairs (a causal 256 window: 0.67)."""
    m = mask.expand(mask.shape[0], 1, n, n)[:, 0]
    t = cdiv(n, tile) * tile
    if t != n:
        m = torch.nn.functional.pad(m, (0, t - n, 0, t - n))
    tiles = m.reshape(m.shape[0], t // tile, tile, t // tile, tile).any(4).any(2)
    return m.sum().item() / (tiles.sum().item() * tile * tile)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check(name, causal, kw, mk, cap, args):
    b, hq, hkv, n, d = 2, 8, 2, 1003, 128
    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(b, hq, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    k = torch.randn(b, hkv, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    v = torch.randn(b, hkv, n, d, device="cuda", generator=gen, dtype=torch.bfloat16)
    kw = dict(kw)
    if "attn_mask" in kw:
        t = kw["attn_mask"]
        if t.dtype == torch.bool:
            t = (
                torch.arange(n, device="cuda")[None, :] < torch.tensor([[n], [517]], device="cuda")
            )[:, None, None, :]
            if kw["attn_mask"].shape[2] > 1:  # a [B, 1, N, N] mask: causal and the padding
                t = t & torch.ones(n, n, dtype=torch.bool, device="cuda").tril()[None, None]
        elif kw["attn_mask"].shape[2] == 1:  # additive key padding (HF's): 0 or the minimum
            keep_t = torch.arange(n, device="cuda")[None, :] < torch.tensor(
                [[n], [517]], device="cuda"
            )
            t = torch.zeros(keep_t.shape, device="cuda", dtype=torch.bfloat16)
            t = t.masked_fill(~keep_t, torch.finfo(torch.bfloat16).min)[:, None, None, :]
        else:
            t = torch.randn(1, hq, n, n, device="cuda", dtype=torch.bfloat16)
        kw["attn_mask"] = t
        mk = {"tensor": t, **({"window": mk["window"]} if "window" in mk else {})}
    alibi = None
    if "alibi_slopes" in kw:  # the check's own head count; the reference adds the dense bias
        from flashgen.kernels.alibi import bias_ref, standard_slopes

        kw["alibi_slopes"] = standard_slopes(hq).cuda()
        alibi = bias_ref(kw["alibi_slopes"], n, n)
        mk = {}
    if "key_lengths" in kw:
        lens = torch.tensor([n, 517], device="cuda")
        kw["key_lengths"] = lens
        if "query_lengths" in kw:
            kw["query_lengths"] = lens
    mk = {"pad": kw} if "pad" in mk else dict(mk)
    mask = visible(n, n, causal=causal, **dense_kwargs(mk, b, n, n))
    for t in (q, k, v):
        t.requires_grad_()
    torch.manual_seed(123)  # the dropout seed the call draws (redrawn below for the reference)
    out = flashgen.attention(q, k, v, causal=causal, impl="flashgen", **kw)
    keep, rate = None, kw.get("dropout_p", 0.0)
    if rate:
        from flashgen.kernels import dropout

        torch.manual_seed(123)
        seed = int(dropout.new_seed().item())
        keep = dropout.keep_mask(seed, rate, b, hq, n, n, "cuda")
    do = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    tensor = kw.get("attn_mask")
    bias = tensor if tensor is not None and tensor.dtype != torch.bool else alibi
    ref = reference(qd, kd, vd, mask, softcap=cap, bias=bias, keep=keep, p=rate)
    want = torch.autograd.grad(ref, (qd, kd, vd), do.double())
    # max abs error relative to the reference's largest entry (bf16 keeps ~3 digits)
    pairs = zip((out, *grads), (ref, *want), strict=True)
    errs = [((g.double() - w).abs().max() / w.abs().max().clamp_min(1e-6)).item() for g, w in pairs]
    nan = any(torch.isnan(t).any().item() for t in (out, *grads))
    ok = not nan and max(errs) < 2e-2
    print(f"check {name}: out {errs[0]:.2e} dq {errs[1]:.2e} dk {errs[2]:.2e} dv {errs[3]:.2e}"
          f" nan={nan} {'ok' if ok else 'FAIL'}", flush=True)  # fmt: skip
    return ok


WARM_ONLY = False
ROUNDS = 3  # readings of the masked and the unmasked kernel per row, alternating (--rounds)
BWD_KINDS: tuple[str, ...] = ()  # backward kinds timed against each other per row (--bwd-kinds)


def describe(kw) -> str:
    """The flashgen keywords of a variant for the CSV (tensors by shape and dtype, not values)."""

    def one(v):
        if isinstance(v, torch.Tensor):
            return f"tensor{list(v.shape)}:{str(v.dtype).removeprefix('torch.')}"
        return repr(v)

    return " ".join(f"{k}={one(v)}" for k, v in kw.items())


def bench(fn):
    if WARM_ONLY:
        fn()
        torch.cuda.synchronize()
        return float("nan")
    return scripts.timer("cuda", 40, warmup_ms=10)(fn)


def fwd_bwd(fn, q, k, v, do):
    def run():
        out = fn()
        torch.autograd.grad(out, (q, k, v), do)

    return run


def unpadded(q, k, v, do, kw, causal):
    """(per-sequence batch-1 calls, their visible pairs over all heads) for a padding row: each
    batch element's valid queries and keys (where `kw`'s lengths and side put them) as its own
    contiguous leaf tensors, for the unmasked kernel on the same work (module docstring)."""
    b, hq, n, _ = q.shape
    klens = kw["key_lengths"].tolist()
    qlens = kw["query_lengths"].tolist() if "query_lengths" in kw else [n] * b
    calls, pairs = [], 0
    for i in range(b):
        kl, ql = klens[i], qlens[i]
        ks = n - kl if kw.get("padding") == "left" else 0
        qs = n - ql if kw.get("padding") == "left" and "query_lengths" in kw else 0
        parts = [t[i : i + 1, :, s : s + m].detach().contiguous().requires_grad_()
                 for t, s, m in ((q, qs, ql), (k, ks, kl), (v, ks, kl))]  # fmt: skip
        calls.append((*parts, do[i : i + 1, :, qs : qs + ql].contiguous()))
        # causal rows pad queries like keys (ql == kl): the diagonal from the first valid key
        pairs += (kl * (kl + 1) // 2 if causal else ql * kl) * hq
    return calls, pairs


def speed(name, causal, kw, mk, cap, shape, writer, dirs=("fwd", "fwd+bwd")):
    b, hq, hkv, n, d = shape
    gen = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=torch.bfloat16).requires_grad_()
        for h in (hq, hkv, hkv)
    )
    mask = visible(n, n, causal=causal, **dense_kwargs(dict(mk), b, n, n))
    pairs = mask.expand(b, 1, n, n).sum().item() * hq  # visible pairs, all heads
    frac = tile_frac(mask, n)
    plain_pairs = (n * (n + 1) // 2 if causal else n * n) * b * hq
    do = torch.randn(b, hq, n, d, device="cuda", dtype=torch.bfloat16)
    kr, vr = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)

    def ours():
        return flashgen.attention(q, k, v, causal=causal, impl="flashgen", **kw)

    def plain():
        return flashgen.attention(q, k, v, causal=causal, impl="flashgen")

    tensor = mk.get("tensor")
    given = mask if tensor is None or tensor.dtype == torch.bool else tensor
    if tensor is not None and tensor.dtype != torch.bool and causal:  # bias + causal for SDPA
        given = tensor.masked_fill(~mask, float("-inf"))

    def theirs():  # SDPA needs the dense mask (and expanded kv heads for a mask + GQA)
        if cap is not None:
            return None
        return sdpa(q, kr, vr, attn_mask=given, dropout_p=kw.get("dropout_p", 0.0))

    def portable():  # the unmasked kernel of the portable family
        with set_env("FLASHGEN_FWD_FAMILY", "portable"):
            return plain()

    for direction, flops_per_pair in (("fwd", 4 * d), ("fwd+bwd", 10 * d)):
        if direction not in dirs:
            continue
        grad = direction != "fwd"
        with torch.set_grad_enabled(grad):
            # The masked and the unmasked kernel alternate, ROUNDS readings each, and the
            # ratio takes the median of each: one reading of the unmasked kernel per row
            # wandered 0.43-0.50 ms within a run (session 14), enough to move a ratio by 15%.
            ours_ms, plain_ms = [], []
            moved = dict.fromkeys(_allocator_counts(), 0)
            for i in range(ROUNDS):
                if i % 2:  # every other round the unmasked kernel first (no fixed place)
                    plain_ms.append(bench(fwd_bwd(plain, q, k, v, do) if grad else plain))
                before = _allocator_counts()
                ours_ms.append(bench(fwd_bwd(ours, q, k, v, do) if grad else ours))
                after = _allocator_counts()
                for key in moved:
                    moved[key] += after[key] - before[key]
                if not i % 2:
                    plain_ms.append(bench(fwd_bwd(plain, q, k, v, do) if grad else plain))
            # cudaMalloc/cudaFree while flashgen's calls were timed (a free, or a retry after
            # an allocation failed, waits for the device and would stall the timed calls)
            counts = " ".join(f"{key}={n}" for key, n in moved.items())
            print(f"allocator {name} {direction}: {counts}", flush=True)
            print(f"readings {name} {direction}: flashgen {_ms(ours_ms)} plain {_ms(plain_ms)}",
                  flush=True)  # fmt: skip
            t_ours, t_plain = statistics.median(ours_ms), statistics.median(plain_ms)
            t_port = bench(fwd_bwd(portable, q, k, v, do) if grad else portable)
            t_sdpa = float("nan")
            if cap is None:
                t_sdpa = bench(fwd_bwd(theirs, q, k, v, do) if grad else theirs)
            t_unpad = float("nan")
            if "key_lengths" in kw:
                seqs, unpad_pairs = unpadded(q, k, v, do, kw, causal)
                t_unpad = 0.0
                for qi, ki, vi, doi in seqs:

                    def one(qi=qi, ki=ki, vi=vi):
                        return flashgen.attention(qi, ki, vi, causal=causal, impl="flashgen")

                    t_unpad += bench(fwd_bwd(one, qi, ki, vi, doi) if grad else one)
        tf = pairs * flops_per_pair / t_ours / 1e9
        tf_plain = plain_pairs * flops_per_pair / t_plain / 1e9
        tf_unpad = 0.0 if t_unpad != t_unpad else unpad_pairs * flops_per_pair / t_unpad / 1e9
        row = dict(
            name=name, b=b, hq=hq, hkv=hkv, n=n, d=d, causal=causal, mask=describe(kw),
            pairs_frac=round(pairs / plain_pairs, 4), dir=direction,
            flashgen_ms=round(t_ours, 4), plain_ms=round(t_plain, 4),
            portable_ms=round(t_port, 4),
            sdpa_ms=round(t_sdpa, 4), tflops=round(tf, 1), plain_tflops=round(tf_plain, 1),
            ratio_vs_plain=round(tf / tf_plain, 3), speedup_vs_sdpa=round(t_sdpa / t_ours, 2),
            unpadded_ms=round(t_unpad, 4),
            ratio_vs_unpadded=round(tf / tf_unpad, 3) if tf_unpad else float("nan"),
            tile_frac=round(frac, 3),
        )  # fmt: skip
        print(" ".join(f"{k}={v}" for k, v in row.items() if k != "mask"), flush=True)
        writer(row)
        if grad and BWD_KINDS:
            print(kinds_line(name, fwd_bwd(ours, q, k, v, do)), flush=True)


def kinds_line(name: str, run) -> str:
    """`run` (a forward+backward) timed under each of BWD_KINDS, alternating, ROUNDS readings
    each: the readings, each kind's median, and each kind's time over the first kind's."""
    readings = {kind: [] for kind in BWD_KINDS}
    for _ in range(ROUNDS):
        for kind in BWD_KINDS:
            with set_env("FLASHGEN_BWD_KIND", kind):
                readings[kind].append(bench(run))
    medians = {kind: statistics.median(xs) for kind, xs in readings.items()}
    first = medians[BWD_KINDS[0]]
    parts = [f"{kind} {_ms(xs)} (median {medians[kind]:.4f}, {medians[kind] / first:.3f}x)"
             for kind, xs in readings.items()]  # fmt: skip
    return f"kinds {name} fwd+bwd: " + "; ".join(parts)


def _ms(xs) -> str:
    return "/".join(f"{x:.4f}" for x in xs)


def _allocator_counts() -> dict:
    """The caching allocator's counters that mean device calls: cudaMalloc and cudaFree
    (`num_device_alloc`/`num_device_free`), retries after a failed allocation (which free the
    cache first) and syncs of every stream (`num_sync_all_streams`)."""
    stats = torch.cuda.memory_stats()
    names = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")
    return {name: int(stats.get(name, 0)) for name in names}


def _per_key_off():
    """Launch plans built with per_key=False: mask tiles gathered as before MASK_PER_KEY."""
    import inspect

    from flashgen.kernels import bwd, fwd

    for mod in (fwd, bwd):
        init = mod._Plan.__init__
        sig = inspect.signature(init)

        def patched(self, *a, _init=init, _sig=sig, **kw):
            bound = _sig.bind(self, *a, **kw)
            bound.arguments["per_key"] = False
            _init(*bound.args, **bound.kwargs)

        mod._Plan.__init__ = patched


def main(argv=None):
    out = os.path.join(os.environ.get("OUT", "."), "masks.csv")
    ap = scripts.parser(__doc__, out=out, budget=50.0, checks=True)
    ap.add_argument("--only", default="", help="comma-separated variant names")
    ap.add_argument("--shape", default="4,16,4,4096,128", help="b,hq,hkv,n,d for the timings")
    ap.add_argument("--dirs", default="fwd,fwd+bwd", help="which of fwd, fwd+bwd to time")
    ap.add_argument(
        "--windows", default="",
        help="comma-separated causal window sizes to add as rows window_causal_<w> (the ratio "
        "against the geometric bound `tile_frac`)",
    )  # fmt: skip
    ap.add_argument("--warm", action="store_true", help="run each timed function once, no timing")
    ap.add_argument(
        "--rounds", type=int, default=3,
        help="readings of the masked and the unmasked kernel per row, alternating; the ratio "
        "takes the median of each (default %(default)s)",
    )  # fmt: skip
    ap.add_argument(
        "--bwd-kinds", default="",
        help="comma-separated backward kinds (split, hopper, onepass) to time each row's "
        "forward+backward under, alternating in this process (`kinds` lines)",
    )  # fmt: skip
    ap.add_argument(
        "--no-per-key", action="store_true",
        help="read key-padding masks as full tiles (MASK_PER_KEY off): the A/B of the vector load",
    )  # fmt: skip
    ap.add_argument(
        "--no-hull", action="store_true",
        help="do not turn a key-padding mask into key-range bounds (padding.key_hull), forward "
        "or backward: the A/B of skipping the padded key tiles",
    )  # fmt: skip
    args = ap.parse_args(argv)
    if args.no_per_key:
        _per_key_off()
    if args.no_hull:
        from flashgen.runtime import primitives

        primitives._bounds = lambda seq_bounds, mask, hopper_hull=None: seq_bounds
        primitives._backward_bounds = lambda seq_bounds, mask: seq_bounds
    global WARM_ONLY, ROUNDS, BWD_KINDS
    WARM_ONLY = args.warm
    ROUNDS = 1 if args.warm else max(1, args.rounds)
    BWD_KINDS = tuple(k for k in args.bwd_kinds.split(",") if k)
    from flashgen.kernels.bwd_kind import KINDS

    unknown = [k for k in BWD_KINDS if k not in KINDS]
    if unknown:
        ap.error(f"--bwd-kinds: unknown kind(s) {', '.join(unknown)} (known: {', '.join(KINDS)})")
    dirs = tuple(args.dirs.split(","))
    start = time.monotonic()
    shape = tuple(int(x) for x in args.shape.split(","))
    windows = tuple(int(w) for w in args.windows.split(",") if w)
    chosen = variants(shape[0], shape[3], shape[1], windows)
    if args.only:  # in the order given (a time budget times the first ones)
        by_name = {v[0]: v for v in chosen}
        chosen = [by_name[name] for name in args.only.split(",") if name in by_name]
    meta = scripts.run_meta("cuda", fwd_family=os.environ.get("FLASHGEN_FWD_FAMILY", ""))
    print(f"{scripts.banner(meta)} FLASHGEN_FWD_FAMILY={meta['fwd_family']}", flush=True)
    failed = 0
    for name, causal, kw, mk, cap in [] if args.no_check else chosen:
        if time.monotonic() - start > args.budget / 2:
            print(f"budget: check of {name} and later skipped", flush=True)
            break
        try:
            failed += not check(name, causal, kw, mk, cap, args)
        except Exception as exc:  # a failing variant is reported, the run goes on
            failed += 1
            print(f"check {name}: ERROR {type(exc).__name__}: {exc}", flush=True)
    with scripts.RowWriter(args.out, FIELDS, meta=meta, append=True) as w:
        for name, causal, kw, mk, cap in chosen:
            if time.monotonic() - start > args.budget:
                print(f"budget spent: {name} and later not timed", flush=True)
                break
            try:
                speed(name, causal, kw, mk, cap, shape,
                      (lambda r: None) if args.warm else w.write,
                      dirs)  # fmt: skip
            except Exception as exc:
                print(f"speed {name}: ERROR {type(exc).__name__}: {exc}", flush=True)
    print(f"checks failed: {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
