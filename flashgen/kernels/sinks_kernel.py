"""The two passes of attention sinks (`flashgen.runtime.sinks`) as one kernel each.

Why kernels: in PyTorch ops the forward's rescale of the output (row share, float32 copy,
product, cast back) and the sink's gradient (two float32 copies, product, sum) were five
passes over an output-sized tensor each, about 166 µs of a 380 µs GPT-OSS-like forward
(B2, 64 query heads, 2k, head dim 64) on an H100 (benchmarks/RESULTS.md, session 52). Here each
reads what it needs once: `sinks_fwd` the output and lse, writing the rescaled output and the
lse with the sink; `sinks_bwd` dout and the output, writing one partial sum per program (the
sum over them is left to PyTorch: a fixed order, so the gradient is deterministic).

A program takes BLOCK_M query rows of one (batch, head). Rows whose lse is +inf (no visible
key: the kernels' convention, or rows the launcher fills) or NaN (rows a padded launch leaves
unwritten) get a share and a sink probability of 0, as `torch.nan_to_num` gave before.
"""

import triton
import triton.language as tl


@triton.jit
def _share_and_full(lse, sink):
    """A row's share of its softmax that is not the sink's, and its logsumexp with the sink
    (both float32), from the plain lse and the sink's logit."""
    valid = (lse == lse) & (lse != float("inf"))
    safe = tl.where(valid, lse, sink)  # (no inf - inf below)
    top = tl.maximum(safe, sink)
    full = top + tl.log(tl.exp(safe - top) + tl.exp(sink - top))
    share = tl.where(valid, tl.exp(safe - full), 0.0)
    return share, tl.where(valid, full, lse)  # (+inf and NaN rows keep their lse)


@triton.jit
def sinks_fwd_kernel(
    Out, Lse, Sinks, NewOut, NewLse,
    s_ob, s_oh, s_om, s_od, s_nb, s_nh, s_nm, s_nd,
    HEADS, SEQ, DIM,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """NewOut = Out * share (rounded once, to Out's dtype), NewLse = the lse with the sink.
    Out / NewOut [B, H, SEQ, DIM] with the given strides; Lse / NewLse float32 [B, H, SEQ]
    contiguous; Sinks [H] (any float dtype, contiguous)."""
    bh = tl.program_id(1)
    b = bh // HEADS
    h = bh % HEADS
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    inside = rows < SEQ
    lse = tl.load(Lse + bh.to(tl.int64) * SEQ + rows, mask=inside, other=0.0)
    sink = tl.load(Sinks + h).to(tl.float32)
    share, full = _share_and_full(lse, sink)
    tl.store(NewLse + bh.to(tl.int64) * SEQ + rows, full, mask=inside)
    both = inside[:, None] & (cols[None, :] < DIM)
    src = Out + b.to(tl.int64) * s_ob + h.to(tl.int64) * s_oh
    src += rows[:, None].to(tl.int64) * s_om + cols[None, :] * s_od
    out = tl.load(src, mask=both, other=0.0).to(tl.float32)
    dst = NewOut + b.to(tl.int64) * s_nb + h.to(tl.int64) * s_nh
    dst += rows[:, None].to(tl.int64) * s_nm + cols[None, :] * s_nd
    tl.store(dst, (out * share[:, None]).to(NewOut.dtype.element_ty), mask=both)


@triton.jit
def sinks_bwd_kernel(
    Dout, Out, Lse, Sinks, Partial,
    s_db, s_dh, s_dm, s_dd, s_ob, s_oh, s_om, s_od,
    HEADS, SEQ, DIM,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """Partial[b, h, block] = -sum over the block's rows of p_sink * delta, p_sink =
    exp(sink - lse) (lse: the one with the sink, as `sinks_fwd` wrote it), delta =
    rowsum(Dout * Out) in float32. Partial float32 [B, H, cdiv(SEQ, BLOCK_M)] contiguous."""
    bh = tl.program_id(1)
    b = bh // HEADS
    h = bh % HEADS
    block = tl.program_id(0)
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    inside = rows < SEQ
    both = inside[:, None] & (cols[None, :] < DIM)
    at = rows[:, None].to(tl.int64)
    d_ptr = Dout + b.to(tl.int64) * s_db + h.to(tl.int64) * s_dh + at * s_dm + cols[None, :] * s_dd
    o_ptr = Out + b.to(tl.int64) * s_ob + h.to(tl.int64) * s_oh + at * s_om + cols[None, :] * s_od
    dout = tl.load(d_ptr, mask=both, other=0.0).to(tl.float32)
    out = tl.load(o_ptr, mask=both, other=0.0).to(tl.float32)
    delta = tl.sum(dout * out, 1)
    lse = tl.load(Lse + bh.to(tl.int64) * SEQ + rows, mask=inside, other=float("inf"))
    sink = tl.load(Sinks + h).to(tl.float32)
    p = tl.exp(sink - lse)
    p = tl.where((p == p) & (p != float("inf")) & inside, p, 0.0)
    tl.store(Partial + bh.to(tl.int64) * tl.num_programs(0) + block, -tl.sum(p * delta, 0))
