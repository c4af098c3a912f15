"""Attention sinks' two kernel passes (`flashgen.kernels.sinks`) against the same math in float64
PyTorch ops: the rescaled output and the lse with the sink, the sinks' gradient; output layouts
the forward produces (q's dimension order), bf16, rows whose lse is +inf or NaN, row counts past
one block, and the kept launches."""

from __future__ import annotations

import pytest
import torch

from flashgen.kernels import sinks


def _want(out, lse, sink):
    """Float64 (out, lse) with the sink; +inf / NaN rows get zeros and keep their lse."""
    lse64, s = lse.double(), sink.double()[None, :, None]
    full = torch.logaddexp(lse64, s)
    share = torch.nan_to_num(torch.exp(lse64 - full), nan=0.0, posinf=0.0)
    return out.double() * share[..., None], full


def _case(b, h, n, d, dtype, layout, seed=0):
    g = torch.Generator().manual_seed(seed)
    if layout == "bnhd":  # the output of a [B, N, H, D] q: q's dimension order
        out = torch.randn(b, n, h, d, generator=g).to(dtype).transpose(1, 2)
    else:
        out = torch.randn(b, h, n, d, generator=g).to(dtype)
    lse = torch.randn(b, h, n, generator=g) * 3
    lse[0, 0, :3] = float("inf")  # rows that see no key
    lse[-1, -1, -2:] = float("nan")  # rows a padded launch leaves unwritten
    sink = torch.randn(h, generator=g).to(dtype)
    return out, lse, sink


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize(
    ("b", "h", "n", "d", "dtype"),
    [(2, 3, 5, 16, torch.float32), (1, 2, 300, 24, torch.float32), (2, 2, 130, 64, torch.bfloat16),
     (1, 1, 6, 256, torch.float16)],
)  # fmt: skip
def test_rescale_matches_float64(b, h, n, d, dtype, layout):
    out, lse, sink = _case(b, h, n, d, dtype, layout)
    got_out, got_lse = sinks.rescale(out, lse, sink)
    want_out, want_lse = _want(out, lse, sink)
    assert got_out.dtype == dtype and got_out.stride() == out.stride()
    # one rounding to the output's dtype of a float32 product: within an ulp, relative
    rel = {torch.float32: 1e-6, torch.bfloat16: 2**-7, torch.float16: 2**-10}[dtype]
    assert ((got_out.double() - want_out).abs() <= rel * want_out.abs() + 1e-7).all()
    finite = torch.isfinite(want_lse)
    assert (got_lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-5
    assert torch.equal(got_lse.isinf(), want_lse.isinf())
    assert torch.equal(got_lse.isnan(), want_lse.isnan())


@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize(
    ("b", "h", "n", "d", "dtype"),
    [(2, 3, 5, 16, torch.float32), (1, 2, 300, 24, torch.float32), (2, 2, 130, 64, torch.bfloat16)],
)  # fmt: skip
def test_grad_matches_float64(b, h, n, d, dtype, layout):
    out, lse, sink = _case(b, h, n, d, dtype, layout, seed=1)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    got = sinks.grad(dout, out, lse, sink)
    delta = (dout.double() * out.double()).sum(-1)
    p = torch.nan_to_num(torch.exp(sink.double()[None, :, None] - lse.double()), nan=0.0,
                         posinf=0.0)  # fmt: skip
    want = -(p * delta).sum((0, 2))
    assert got.dtype == torch.float32 and got.shape == (h,)
    assert (got.double() - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item())
    assert torch.equal(got, sinks.grad(dout, out, lse, sink))  # a fixed order of the sums


def test_empty_and_kept_launches():
    out, lse, sink = _case(1, 2, 0, 16, torch.float32, "bhnd")
    assert sinks.rescale(out, lse, sink)[0].shape == out.shape
    assert torch.equal(sinks.grad(out, out, lse, sink), torch.zeros(2))
    sinks._fwd_launches.clear()
    out, lse, sink = _case(1, 2, 7, 16, torch.float32, "bhnd")
    sinks.rescale(out, lse, sink)
    sinks.rescale(out.clone(), lse.clone(), sink.clone())
    assert len(sinks._fwd_launches) == 1  # the same signature: one launch kept
    sinks.rescale(out[:, :, :5], lse[:, :, :5].contiguous(), sink)
    assert len(sinks._fwd_launches) == 2


def test_ops_opcheck():
    """The two ops' schemas and fakes agree with what their kernels return (shapes, strides,
    dtypes), also for the output layout of a [B, N, H, D] q."""
    import flashgen.runtime.sinks  # noqa: F401 (registers the ops)

    out, lse, sink = _case(2, 3, 9, 16, torch.float32, "bnhd")
    lse = torch.nan_to_num(lse, nan=0.0)
    torch.library.opcheck(torch.ops.flashgen.sinks_fwd.default, (out, lse, sink))
    torch.library.opcheck(torch.ops.flashgen.sinks_bwd.default, (out.clone(), out, lse, sink))


def test_a_kept_launch_is_not_reused_for_another_batch_size():
    """Two calls that differ only in the batch size have the same strides and sizes but not
    the same grid: each gets its own launch (a launch with the larger batch's grid would
    write past the smaller call's buffers)."""
    sinks._fwd_launches.clear()
    sinks._bwd_launches.clear()
    big = _case(3, 2, 7, 16, torch.float32, "bhnd", seed=4)
    small = tuple(t[:1] if t.dim() > 1 else t for t in big)
    for out, lse, sink in (big, small):
        got_out, got_lse = sinks.rescale(out, lse, sink)
        want_out, _ = _want(out, lse, sink)
        assert got_out.shape == out.shape
        assert ((got_out.double() - want_out).abs() <= 1e-6 * want_out.abs() + 1e-7).all()
        assert torch.equal(sinks.grad(out, out, lse, sink), sinks.grad(out, out, lse, sink))
    assert len(sinks._fwd_launches) == 2 and len(sinks._bwd_launches) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
def test_both_passes_on_the_gpu(layout):
    """Compiled for the GPU and launched directly after the first call: both passes against
    float64, bf16 output, two batch sizes of one signature otherwise (the kept launches)."""
    sinks._fwd_launches.clear()
    for b in (3, 1, 3):
        out, lse, sink = (t.cuda() for t in _case(b, 8, 300, 64, torch.bfloat16, layout))
        got_out, got_lse = sinks.rescale(out, lse, sink)
        want_out, want_lse = _want(out, lse, sink)
        assert ((got_out.double() - want_out).abs() <= 2**-7 * want_out.abs() + 1e-7).all()
        finite = torch.isfinite(want_lse)
        assert (got_lse.double()[finite] - want_lse[finite]).abs().max().item() <= 1e-5
        dout = torch.randn_like(out)
        delta = (dout.double() * out.double()).sum(-1)
        p = torch.nan_to_num(torch.exp(sink.double()[None, :, None] - lse.double()), nan=0.0,
                             posinf=0.0)  # fmt: skip
        want = -(p * delta).sum((0, 2))
        got = sinks.grad(dout, out, lse, sink)
        assert (got.double() - want).abs().max().item() <= 1e-4 * max(1.0, want.abs().max().item())
