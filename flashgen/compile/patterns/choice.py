"""What a replaceable attention site runs at its traced shape (`site_choices`), and the
`F.scaled_dot_product_attention` and `nn.MultiheadAttention` calls left to PyTorch because of it,
with the small hand-written ones that Inductor compiles faster as written (`keep_reason`).

Why a site may be left alone: Dynamo guards every size it did not mark dynamic, so a graph
traced with static sizes only ever runs that shape, and the run-time choice of
`flashgen.runtime.vendor` (records, defaults, the host-time rule) is known when it is
compiled. Where that choice is, for the forward and for the backward alike, the very SDPA
backend PyTorch's own call picks at that shape, replacing the call would run the same kernel
through a Python custom op: more host time, and a different graph for Inductor to compile
(the Llama block of benchmarks/RESULTS.md ran the same kernels either way and read 0.98-0.99x
Inductor forward+backward, host-bound). Left as the user wrote it, the call compiles exactly
as without flashgen. Graphs with symbolic sizes are replaced as before and choose per call,
except that a masked call too small for flashgen's masked path (`masked_keep_reason`) and a
small call with attention dropout (`dropout_keep_reason`) are judged at their traced shape
whatever their sizes.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...core.impls import FLASHGEN, SDPA_IMPLS, impl_label, sdpa_backend
from ...core.spec import KernelSpec
from .core import example_value, node_arg

# Sequence lengths of the tensors that ask PyTorch which backend it would pick (its checks look
# at dtypes, head dims, head counts and flags, not at how long the sequences are). The probes
# are contiguous: a call on strided views (q transposed from [B, S, H, D]) is asked as if it
# were not; should PyTorch pick otherwise for those strides, the kept call still runs exactly
# what the user's program ran without flashgen.
PROBE_SEQ = 128


def site_choices(site: Any, grad: bool = False) -> list[tuple[str, str]]:
    """[(impl, label)] for a call without and with a backward at the site's traced shape: the
    implementation `flashgen.runtime.vendor` would run (the host-time rule applied) and words
    saying why ("sdpa_cudnn 1.10x (shipped)", "sdpa_cudnn (default; flashgen 1.06x (shipped)
    saves < host time)"). `grad`: the site's calls have a backward, so the forward's choice
    takes the margin of such calls (`vendor.host_margin_s(True)`), as the run time's mix does
    (`vendor.hybrid_backward`)."""
    from ...runtime import dispatch, vendor

    cuda = site.device == "cuda"
    out = []
    for direction in ("fwd", "bwd"):
        spec = KernelSpec(
            site.head_dim, bool(site.causal), site.dtype, direction, site.window is not None
        )
        choice = dispatch.impl_choice(spec, site.seq_q, site.seq_k, cuda)
        impl, ratio, source = choice
        label = impl if ratio is None else impl_label(impl, ratio)
        instead = None
        if cuda and site.rows:
            work = (site.rows, 1, site.seq_q, site.seq_k, site.head_dim)
            backward = direction == "bwd"
            margin = vendor.host_margin_s(backward or grad)
            instead = vendor.host_rule(choice, spec, work, bool(site.causal), backward, margin)
        if instead is not None:  # the record's margin saves less than the op's host time
            out.append((instead, f"{instead} (default; {label} ({source}) saves < host time)"))
        else:
            out.append((impl, f"{label} ({source})"))
    return out


def keep_reason(m: Any) -> str | None:
    """Why the matched, replaceable site `m` (a `core.Match`) is left to PyTorch, or None to
    replace it: only a plain SDPA call or nn.MultiheadAttention (no mask tensor, window,
    dropout, ALiBi or softcap, the causal diagonal top-left) on tensors of static sizes whose
    forward and backward would both run the SDPA backend that PyTorch's own call picks there
    (on any device: the CPU has SDPA's flash backend too); or such a call whose only extras
    are a mask tensor and perhaps dropout, too small for flashgen's masked path to gain
    (`masked_keep_reason`); or one whose only extra is dropout, too small in training
    (`dropout_keep_reason`); or hand-written attention with a per-key or dense additive mask,
    likewise (`masked_keep_reason`: HF BERT's and T5's eager attention); or hand-written
    attention without a mask tensor (causal or not) too small for flashgen to gain in training
    (`plain_keep_reason`)."""
    site = m.site
    if not _sdpa_extras_only(site):
        return None
    if site.kind not in ("sdpa", "mha"):  # hand-written
        if not site.mask:  # causal or nothing: small with a backward (`plain_keep_reason`)
            return plain_keep_reason(m)
        ruled = site.key_mask or site.mask == "add"  # a per-key or dense additive mask
        return masked_keep_reason(m) if ruled else None
    if site.mask:
        return masked_keep_reason(m)
    if site.dropout:
        return dropout_keep_reason(m)
    operands = _operands(m)
    if operands is None:
        return None
    (q, k, v), grad = operands
    if site.kind == "sdpa":
        node = m.out
        if node_arg(node, 3, "attn_mask") is not None:
            return None  # a mask proven causal or padding-free: PyTorch's call reads the tensor
        if not all(t.dim() == 4 for t in (q, k, v)):
            return None
        flags = _sdpa_flags(node)
        if flags is None:
            return None
        heads = (q.shape[1], k.shape[1], q.shape[3])
    else:
        # nn.MultiheadAttention (need_weights=False, as matched) projects q, k, v to [batch,
        # heads, seq, head dim] and calls SDPA: without a mask when it has none, and with
        # is_causal=True in place of a causal attn_mask when is_causal says so and there is no
        # key-padding mask (F.multi_head_attention_forward); else it passes SDPA a mask tensor,
        # which the op does not read (it runs the causal kernels), so that site is replaced.
        p = m.mha
        if p["need_weights"]:  # PyTorch's call takes its explicit softmax, not SDPA
            return None
        if p["key_padding_mask"] is not None:
            return None
        if p["attn_mask"] is not None and not (m.causal and p["is_causal"]):
            return None
        heads = (p["num_heads"], p["num_heads"], site.head_dim)
        flags = (bool(m.causal), None, False)
    if not all(type(s) is int for t in (q, k, v) for s in t.shape):
        return None  # symbolic sizes: the graph serves several shapes, each chooses at run time
    choices = site_choices(site, grad)
    impls = {impl for impl, _ in choices}
    if len(impls) != 1 or FLASHGEN in impls:
        return None
    (impl,) = impls
    if impl not in SDPA_IMPLS or pytorch_pick(q, grad, *heads, *flags) != int(sdpa_backend(impl)):
        return None
    return (
        f"left to PyTorch: at this static shape the op would run {impl}, what PyTorch's own "
        f"call runs (fwd: {choices[0][1]}; bwd: {choices[1][1]})"
    )


# Issue 15 for masked calls (a boolean or additive mask tensor, perhaps with dropout): the
# least forward FLOPs (4 x batch x heads x query rows x keys x head dim, halved when causal) at
# which flashgen's kernels replace a static SDPA or nn.MultiheadAttention call, by (dense mask,
# head dim >= 128, with a backward). Below them the call stays as the user wrote it. Why: a
# masked call goes through the op's general path (mask checks, the key range of a key-padding
# mask, the block lists of a dense boolean one: host work that plain calls do not have), and
# SDPA with the same mask is PyTorch's C++ path. On an H100 (benchmarks/RESULTS.md, session
# 47, after the key range and the block lists became direct launches; back-to-back calls, host
# and GPU together, boolean masks, bf16, SDPA's time over flashgen's, > 1: flashgen faster):
# per-key masks at head dim 64, forward: 6.4 GFLOP 0.66-0.76x, 17 GFLOP 0.81x, 19 GFLOP
# 1.33x, 26 GFLOP 1.30x, 34 GFLOP 1.81x; with a backward: 19 GFLOP 0.83-0.86x, 26 GFLOP
# 0.88-1.17x, 34 GFLOP 0.97-1.28x, 69 GFLOP 1.48x; at head dim 128, 34 GFLOP 0.66-1.41x /
# 0.75-0.85x, 69 GFLOP 1.24-1.58x / 1.32-1.34x. HF's encoders hand SDPA the [B, 1, N, N]
# expansion of their key-padding mask, which costs SDPA more (the same sizes read 1.08-1.38x
# with a backward from 19 GFLOP). Dense masks (causal and padding), head dim 64: forward 17
# GFLOP 1.12-1.24x and every larger size 1.08-2.41x; with a backward 17 GFLOP 0.69-0.89x, 34
# GFLOP 1.25-1.36x, 69 GFLOP 1.56-1.67x, 103-137 GFLOP 1.99-2.08x (with the block lists, which
# 1k x 1k calls now take: `block_mask.MIN_SCORES`); head dim 128: forward 34 GFLOP 1.64x, with
# a backward 34 GFLOP 0.71x, 69 GFLOP 1.58x, 137 GFLOP 1.86x. Dropout beside a dense mask (34
# GFLOP) 2.79x / 1.28x. Attention dropout takes its mask's thresholds, except beside a
# per-key mask (`MASKED_MIN_FLOPS_DROPOUT`). Each threshold lies above the largest size that
# lost and at or below the least that won in every reading (a size that read both ways, such
# as 34 GFLOP per key with a backward or at head dim 128, counts as lost); the dense forwards,
# which won at every size measured, sit just below the least (17 GFLOP at head dim 64, 34 at
# 128).
MASKED_MIN_FLOPS = {
    # (dense, head dim >= 128, backward): forward FLOPs
    (False, False, False): 19e9,
    (False, False, True): 50e9,
    (False, True, False): 50e9,
    (False, True, True): 50e9,
    (True, False, False): 15e9,
    (True, False, True): 30e9,
    (True, True, False): 30e9,
    (True, True, True): 60e9,
}
# The thresholds of a per-key masked call with attention dropout, where they differ from
# MASKED_MIN_FLOPS: SDPA's dropout path with a mask costs it more than the mask alone (session
# 47, same sweep, boolean per-key masks, p 0.1, head dim 64: 12.9 GFLOP 1.53x forward / 0.64x
# with a backward, 34 GFLOP 1.89x / 1.36x, 69 GFLOP 1.90x / 1.80x; without dropout 0.99x /
# 0.71x, 1.81-1.84x / 0.97-1.28x and 1.93x / 1.48x); placed as MASKED_MIN_FLOPS's are.
# Dense masks with dropout read like dense masks without (34 GFLOP 2.79x / 1.28x).
MASKED_MIN_FLOPS_DROPOUT = {
    (False, False, False): 12e9,
    (False, False, True): 30e9,
}
# A per-key mask that PyTorch's call gets expanded along the query rows (HF's encoders hand
# SDPA the [B, 1, N, N] expansion of their padding mask, which SDPA reads as a dense additive
# mask) takes MASKED_MIN_FLOPS's per-key thresholds too. Session 47's sweep of the call alone in
# that form (head dim 64 with a backward: 12.9 GFLOP 0.77x, 17.2 0.69x, 19.3 1.08-1.16x, 25.8
# 1.17x, 34.4 1.14-1.38x) had given it 19 GFLOP with a backward; under it HF BERT at 32 x 512
# without dropout (25.8 GFLOP a site, both replaced) trained at 0.973x Inductor (forward 1.097x;
# H100, session 48), so that threshold is gone until a model between 26 and 50 GFLOP says
# otherwise.

# The thresholds of a dense additive mask (no block lists: they are boolean only), forward and
# with a backward. Measured on the H100 in session 48 (`masked_sweep2.py --additive`: SDPA given
# the same [B, 1, N, N] additive mask over flashgen, wall time of back-to-back calls): head dim
# 64 forward 17.2 GFLOP 0.989x, 34.4 0.972x, 68.7 0.954-0.973x, 137.4 0.961x; with a backward
# 0.944x, 0.936x, 0.953-0.955x, 0.968x; head dim 128 at 137.4 GFLOP 1.024x / 1.010x. So head dim
# 64 keeps PyTorch's call up to the largest size measured (session 46's 200 with a backward now
# the forward's too) and head dim 128 takes flashgen's from 100 (nothing below 137 measured).
# With dropout, MASKED_MIN_FLOPS's (8 x 16 x 1k, head dim 64: 1.64x / 1.08x in the same sweep;
# nn.Transformer's dense additive sites with dropout, replaced: 1.02x Inductor, session 47).
MASKED_MIN_FLOPS_ADDITIVE = {
    (True, False, False): 200e9,
    (True, False, True): 200e9,
    (True, True, False): 100e9,
    (True, True, True): 100e9,
}
# Hand-written attention with a per-key mask or a dense additive one: the least forward FLOPs
# at which flashgen's kernels replace it, by (dense, head dim >= 128, with a backward), whatever
# the dropout; below them the site stays as written and Inductor compiles it (two matrix
# products around one fused softmax kernel that adds the masks where they are). Measured on the
# H100 (benchmarks/RESULTS.md, session 55; HF models with eager attention, width 768, 12 heads
# of 64, 2 layers, right padding, Inductor's time over flashgen's with the sites replaced,
# forward / forward+backward):
# - per key (HF BERT's [B, 1, 1, N] additive padding): B8 T512, 6.4 GFLOP a site, 0.78x / 0.85x
#   (the host's time a forward: 841 against 626 µs); B32 T512, 25.8 GFLOP, 1.71x / 1.27x. The
#   threshold lies above the largest size that lost and at or below the least that won, as
#   MASKED_MIN_FLOPS's do (nothing between them measured).
# - dense additive (T5's relative position bias [1, H, N, N] plus the padding: the op's kernels
#   take one mask tensor, so the rewrite hands them the sum written whole, and a bias that
#   requires grad gets a [B, H, N, N] gradient reduced after): T5's encoder at B8 T512 (6.4
#   GFLOP) 0.87x / 0.87x, B8 T1k (25.8) 0.87x / 0.87x, B4 T2k (51.5) 0.88x / 0.94x. No win
#   measured: MASKED_MIN_FLOPS_ADDITIVE's values (SDPA given a dense additive mask lost up to
#   137 GFLOP at head dim 64; head dim 128 won at 137).
HAND_WRITTEN_MIN_FLOPS = {
    **{(False, wide, grad): 25e9 for wide in (False, True) for grad in (False, True)},
    **MASKED_MIN_FLOPS_ADDITIVE,  # (dense, head dim >= 128, backward): the dense rows
}
# Hand-written attention without a mask tensor (a proven causal structure or none, no window,
# ALiBi or softcap; dropout: below) whose gradient is wanted: the least forward FLOPs (causal
# halved) at which flashgen's kernels replace it; below them the site stays as written and
# Inductor compiles it. Without a backward every size measured gained, so none is kept. Measured on the H100
# (benchmarks/RESULTS.md, session 56; HF models with eager attention and no padding, 2 layers,
# bf16, Inductor's time over flashgen's with the sites replaced, forward+backward): Llama (its
# causal mask from its own positions, proven: the plain causal op; GQA 4) at head dim 64 B8 T512
# (3.2 GFLOP a site) 0.95x, B4 T1k (6.4) 0.97x, B16 T512 (6.4) 1.07x, B8 T1k and B32 T512
# (12.9) 1.09x and 1.42x; at head dim 128 B4 T512 (4.3) 0.93x, B8 T512 (8.6) 1.04x, B4 T1k
# (17.2) 1.24x; BERT without a mask (non-causal) at head dim 64 B4 T512 (3.2) 1.00x, B8 T512
# (6.4) 0.91x (0.99x by the rounds' median), B16 T512 (12.9) 1.02x. The forwards alone read
# 1.05-2.13x. The threshold lies above the largest size that lost (6.4, which read both ways)
# and at or below the least that won above it (8.6), as MASKED_MIN_FLOPS's do. Static sizes
# and head dims from 64 only: a graph with symbolic sizes may serve lengths whose N x N scores
# Inductor's graph could not hold, where flashgen's kernels run, and below head dim 64 (not
# measured) the same FLOPs hold more scores (`plain_keep_reason`).
HAND_WRITTEN_PLAIN_MIN_FLOPS = 8e9
# The same for a site without causal structure with attention dropout (p 0.1, training), which
# lost to Inductor's graph at larger sizes than without dropout. Measured on the H100 (session
# 57, as above, forward+backward, head dim 64): BERT without a mask B8 T512 (6.4 GFLOP a site)
# 0.93x, B16 T512 (12.9) 0.97x; the least win above is HF BERT's with its padding and dropout at
# B32 T512 (25.8, a per-key site: 1.45x, session 56), so the per-key threshold of
# HAND_WRITTEN_MIN_FLOPS. Causal sites with dropout take HAND_WRITTEN_PLAIN_MIN_FLOPS: Llama
# (GQA 4) B8 T512 (3.2) 0.79x, B16 T512 (6.4) 1.06x, B8 T1k (12.9, forced) 1.43x.
HAND_WRITTEN_PLAIN_MIN_FLOPS_DROPOUT = 25e9
# The same for an SDPA or nn.MultiheadAttention call with attention dropout and no mask tensor
# (causal or not), which PyTorch runs as its own fused dropout kernels. Measured on the H100
# (benchmarks/RESULTS.md, session 59; HF models with SDPA attention and no padding, 2 layers,
# dropout 0.1, head dim 64, bf16, Inductor's time over flashgen's forward+backward, each size
# one to three processes): Llama (causal, GQA 4) B8 T512 (3.2 GFLOP a site) 0.920x, 0.927x; B16
# T512 (6.4) 0.812x, 0.852x, 1.007x; B32 T512 (12.9) 1.196x; B8 T1k (12.9) 1.093x; BERT (no
# mask) B8 T512 (6.4) 0.921x, B12 T512 (9.7) 0.994x, B16 T512 (12.9) 1.397x (session 47 had
# 1.15-1.18x from 12.9). The forwards alone read 0.96-2.59x. The op alone, eager (B x 12 heads,
# head dim 64), read 0.39-0.83x SDPA's forward+backward from 1.6 to 25.8 GFLOP: there a call is
# bound by the host (at B8 T512 causal 104 µs of GPU work in a 304 µs call), and the op's
# forward+backward with dropout takes more host time than SDPA's (in the models Inductor's
# graph with SDPA's dropout read slower than SDPA alone suggests, so they gained from 12.9).
# Session 61, another H100 host, the same runs: at 12.9 Llama B8 T1k 0.916x, 0.963x, B32 T512
# 1.002x, BERT B16 T512 0.833x, 0.998x (losses where session 59 read gains: the host decides
# there); at 19.3 Llama B12 T1k 1.292x, BERT B24 T512 1.815x; at 25.8 Llama B16 T1k 1.349x.
# The op's kernels alone took less GPU time than SDPA's dropout kernels from 1k keys there
# (0.77-0.90x, profiler kernel sums), but its eager calls read host-bound on that host, as
# SDPA's small calls did. The threshold lies above the largest size that lost (12.9) and at or
# below the least that won on both hosts (19.3), as MASKED_MIN_FLOPS's do.
SDPA_DROPOUT_MIN_FLOPS = 19e9
# nn.TransformerEncoderLayer served for inference (`encoder_layer`): the least forward FLOPs of
# its attention (causal halved) at which its fused op is written out around flashgen's kernels.
# Measured on the H100 (benchmarks/RESULTS.md, session 65; benchmarks/encoder_infer.py, 4
# layers, bfloat16, torch 2.11, the compiled encoder's time with Inductor, which keeps the fused
# op, over its time with the layers written out): without a mask the fused layer ran faster at
# every size met (0.60-0.88x, 1 x 64 tokens of width 256 to 4 x 2048 of width 1024, 68.7 GFLOP
# a site), so it is never written out there; with a causal src_mask, which the fused op applies
# as a dense mask, the written-out layers read 0.77-0.83x up to 2.1 GFLOP and 5.27x at 34.4
# (4 x 2048 tokens, 16 heads of 64). Nothing between was measured: the threshold is the least
# win. By causal: (benchmarks/encoder_infer.py --every-size sets both to 0 to time the rewrite)
FUSED_LAYER_MIN_FLOPS = {False: math.inf, True: 34e9}
# The devices whose calls these size rules apply to (the figures above are a GPU's; on the CPU
# the kernels run in Triton's interpreter, for tests).
MASKED_RULE_DEVICES = ("cuda",)


def plain_keep_reason(m: Any) -> str | None:
    """Why hand-written attention without a mask tensor (`keep_reason`: causal or not, nothing
    else) is left as written, or None to replace it: a site `_sized` measures whose gradient is
    wanted, with static sizes, head dim >= 64, and fewer forward FLOPs than
    `HAND_WRITTEN_PLAIN_MIN_FLOPS` (`HAND_WRITTEN_PLAIN_MIN_FLOPS_DROPOUT` without causal
    structure and with attention dropout); Inductor then compiles the graph as without
    flashgen."""
    site = m.site
    least = HAND_WRITTEN_PLAIN_MIN_FLOPS
    if site.dropout and not site.causal:
        least = HAND_WRITTEN_PLAIN_MIN_FLOPS_DROPOUT
    small = _trained_below(m, least, static_only=True)
    if small is None:
        return None
    flops, _ = small
    what = ("causal attention" if site.causal else "attention") + (
        " with dropout" if site.dropout else ""
    )
    return (
        f"left as written: {what} of {flops / 1e9:.1f} GFLOP with a backward runs faster as "
        f"Inductor compiles it (flashgen from {least / 1e9:.0f} GFLOP)"
    )


def fused_layer_keep_reason(m: Any) -> str | None:
    """Why the attention of an nn.TransformerEncoderLayer's fused inference op (`m`, its
    written-out MHA call) leaves the layer fused, or None to write it out: on a device of
    MASKED_RULE_DEVICES without a forced implementation (`_sized`), no mask, or a causal one
    below `FUSED_LAYER_MIN_FLOPS` at its traced size; PyTorch's fused op then runs the layer
    as it does without flashgen."""
    sized = _sized(m)
    if sized is None:
        return None
    flops, _, static = sized
    least = FUSED_LAYER_MIN_FLOPS[bool(m.site.causal)]
    if flops >= least:
        return None
    what = "causal attention" if m.site.causal else "attention without a mask"
    traced = "" if static else " at its traced size"
    written = f"from {least / 1e9:.0f} GFLOP" if math.isfinite(least) else "at no size measured"
    return (
        f"left to PyTorch's fused encoder layer: {what} of {flops / 1e9:.1f} GFLOP{traced} "
        f"runs faster there than the layer written out around flashgen's kernels (written out "
        f"{written})"
    )


def dropout_keep_reason(m: Any) -> str | None:
    """Why an SDPA or nn.MultiheadAttention call whose only extra is attention dropout (causal
    or not) is left to PyTorch, or None to replace it: a site `_sized` measures whose gradient
    is wanted, head dim >= 64 (nothing narrower was measured), with fewer forward FLOPs than
    `SDPA_DROPOUT_MIN_FLOPS`. Sizes are the traced ones, as in `masked_keep_reason`: a graph
    with symbolic sizes traced small keeps PyTorch's call for every length it serves, which is
    what the model runs without flashgen."""
    small = _trained_below(m, SDPA_DROPOUT_MIN_FLOPS, static_only=False)
    if small is None:
        return None
    flops, static = small
    traced = "" if static else " at its traced size"
    what = "causal call" if m.site.causal else "call"
    return (
        f"left to PyTorch: a {what} with dropout of {flops / 1e9:.1f} GFLOP{traced} with a "
        f"backward runs faster as PyTorch's own call (flashgen from "
        f"{SDPA_DROPOUT_MIN_FLOPS / 1e9:.0f} GFLOP)"
    )


def _trained_below(m: Any, least: float, *, static_only: bool) -> tuple[float, bool] | None:
    """(forward FLOPs, whether the sizes are static) of a site the training rules apply to, or
    None: a site `_sized` measures, head dim >= 64 (nothing narrower was measured), whose
    gradient is wanted, with fewer forward FLOPs than `least`, and static sizes where
    `static_only`."""
    sized = _sized(m)
    if sized is None or m.site.head_dim < 64:
        return None
    flops, grad, static = sized
    if not grad or (static_only and not static) or flops >= least:
        return None
    return flops, static


def _sized(m: Any) -> tuple[float, bool, bool] | None:
    """(forward FLOPs, 4 x batch x heads x query rows x keys x head dim, halved when causal;
    whether a gradient flows through the site; whether its sizes are static) for a site the
    size rules apply to, or None: a site on a device of MASKED_RULE_DEVICES with as many query
    rows as keys (what was measured: not a KV cache's decode or prefill chunk), no
    implementation forced (FLASHGEN_IMPL=flashgen: every site replaced, the kernels' own
    figures), and tensor operands."""
    from ...runtime import dispatch

    site = m.site
    if site.device not in MASKED_RULE_DEVICES or not site.rows or dispatch.forced() is not None:
        return None
    if site.seq_q != site.seq_k:
        return None
    operands = _operands(m)
    if operands is None:
        return None
    tensors, grad = operands
    flops = 4.0 * site.rows * site.seq_q * site.seq_k * site.head_dim
    flops *= 0.5 if site.causal else 1.0
    return flops, grad, all(type(s) is int for t in tensors for s in t.shape)


def masked_keep_reason(m: Any) -> str | None:
    """Why the masked site `m` (an SDPA or nn.MultiheadAttention call whose only extras are its
    mask tensor and perhaps dropout, or hand-written attention with a per-key or dense additive
    mask and perhaps dropout: `HAND_WRITTEN_MIN_FLOPS`) is left to PyTorch, or None to replace
    it: a CUDA call with as many query rows as keys (the sweep's calls; a decode step over a KV
    cache has few FLOPs and much to read, where flashgen's split-KV kernels ran 3-4x faster than
    SDPA given the same mask, session 40) and fewer FLOPs than `MASKED_MIN_FLOPS` asks for its kind
    (`MASKED_MIN_FLOPS_DROPOUT` with attention dropout, `MASKED_MIN_FLOPS_ADDITIVE` for a
    dense additive mask, where they have the kind).
    Sizes are the traced ones: a graph with symbolic sizes is judged at its traced shape and
    serves every other length alike (a graph traced short keeps PyTorch's call, which is never
    slower than PyTorch; one traced long replaces it), as HF fine-tuning with padding per batch
    meets once Dynamo marks the length dynamic. Sites `_sized` does not measure are replaced."""
    site = m.site
    sized = _sized(m)
    if sized is None:
        return None
    flops, grad, static = sized
    traced = "" if static else " at its traced size"
    dense = not site.key_mask
    kind_key = (dense, site.head_dim >= 128, grad)
    if site.kind not in ("sdpa", "mha"):  # hand-written (`keep_reason`)
        least = HAND_WRITTEN_MIN_FLOPS[kind_key]
        mask = "a dense additive mask" if dense else "a per-key mask"
        return None if flops >= least else (
            f"left as written: attention with {mask}, {flops / 1e9:.1f} GFLOP{traced}"
            f"{' with a backward' if grad else ''}, runs faster as Inductor compiles it "
            f"(flashgen from {least / 1e9:.0f} GFLOP)"
        )  # fmt: skip
    least = MASKED_MIN_FLOPS[kind_key]
    if site.dropout:
        least = MASKED_MIN_FLOPS_DROPOUT.get(kind_key, least)
    elif dense and site.mask == "add":
        least = MASKED_MIN_FLOPS_ADDITIVE.get(kind_key, least)
    if flops >= least:
        return None
    kind = ("dense" if dense else "per-key") + (
        " masked call with dropout" if site.dropout else " masked call"
    )
    return (
        f"left to PyTorch: a {kind} of {flops / 1e9:.1f} GFLOP{traced}"
        f"{' with a backward' if grad else ''} runs faster as SDPA with its mask (flashgen from "
        f"{least / 1e9:.0f} GFLOP: the op's host time exceeds what its kernel saves)"
    )


def _sdpa_extras_only(site: Any) -> bool:
    """Whether the site's extras, if any, are ones PyTorch's own call takes too (a mask tensor,
    dropout): no window, ALiBi, softcap or bottom-right diagonal."""
    return not (
        site.window is not None
        or site.alibi
        or site.sinks
        or site.softcap is not None
        or site.align != "top_left"
    )


def _operands(m: Any) -> tuple[tuple[torch.Tensor, ...], bool] | None:
    """((q, k, v) example values, whether a gradient flows through the site) for an SDPA site
    (its query, key and value), an nn.MultiheadAttention one (its inputs; its projection
    weight counts for the gradient) or hand-written attention (its operands; its mask tensors
    count); None when one is not a tensor."""
    if m.site.kind == "sdpa":
        names = ("query", "key", "value")
        nodes = [node_arg(m.out, i, n) for i, n in enumerate(names)]
        weights = []
    elif m.mha is None:  # hand-written: a learned bias (T5's) brings a gradient too
        nodes = [m.q, m.k, m.v]
        weights = [x for x in (m.attn_mask, m.key_bias and m.key_bias[0]) if x is not None]
    else:
        p = m.mha
        nodes = [m.q, m.k, m.v]
        weights = [p["q_proj_weight"] if p["use_separate_proj_weight"] else p["in_proj_weight"]]
    tensors = tuple(example_value(x) for x in nodes)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    grad = any(t.requires_grad for t in tensors) or any(
        getattr(example_value(w), "requires_grad", False) for w in weights
    )
    return tensors, grad


def _sdpa_flags(node: Any) -> tuple | None:
    """(is_causal, scale, enable_gqa) of the SDPA call `node`, or None unless all three are
    Python constants PyTorch can be asked with."""
    is_causal = node_arg(node, 5, "is_causal", False)
    scale = node_arg(node, 6, "scale", None)
    enable_gqa = node_arg(node, 7, "enable_gqa", False)
    if not (isinstance(is_causal, bool) and isinstance(enable_gqa, bool)):
        return None
    if scale is not None and not isinstance(scale, float | int):
        return None
    return is_causal, scale, enable_gqa


def pytorch_pick(
    like: Any,
    grad: bool,
    heads_q: int,
    heads_kv: int,
    head_dim: int,
    is_causal: bool,
    scale,
    enable_gqa: bool,
) -> int | None:
    """The `SDPBackend` value PyTorch's dispatch picks for an SDPA call with these flags on
    [batch, heads, seq, head_dim] tensors of `like`'s dtype and device (requiring grad or
    not), asked with small ones (batch 1, PROBE_SEQ rows); None when it cannot be asked."""

    def probe(heads):
        shape = (1, heads, PROBE_SEQ, head_dim)
        return torch.empty(shape, dtype=like.dtype, device=like.device).requires_grad_(grad)

    try:
        return int(
            torch._fused_sdp_choice(
                probe(heads_q), probe(heads_kv), probe(heads_kv), None, 0.0, is_causal,
                scale=scale, enable_gqa=enable_gqa,
            )
        )  # fmt: skip
    except Exception:  # (an older torch without the argument, a device it cannot ask)
        return None
