"""The split backward's dQ kernel overlapped with its dK/dV kernel (FLASHGEN_BWD_OVERLAP=1), and
the deterministic mode's bit equality on a GPU.

On the CPU there is no side stream: the overlap switch must leave the launch order and the
results as they are. On a GPU the two kernels write disjoint outputs, so the overlapped
gradients must equal the sequential ones bit for bit, match float64, and the switch must stay
off inside CUDA-graph capture.
"""

from __future__ import annotations

import pytest
import torch
from test_backward import (
    BF16,
    F16,
    assert_grads_close,
    kernel_grads,
    make_inputs,
    reference_grads,
)

from flashgen.kernels import streams
from flashgen.kernels.bwd import backward
from flashgen.ops import attention


def test_no_side_stream_for_cpu_tensors(monkeypatch):
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "1")
    assert streams.side_stream(torch.empty(1, 1, 1, 8)) is None


def test_overlap_default_rule(monkeypatch):
    """Unset: on from DEFAULT_MIN_ROWS query rows x heads, dQ first; "0" off; "1"/"2" on."""
    rows = streams.DEFAULT_MIN_ROWS
    small, large = torch.empty(1, 1, rows - 1, 4), torch.empty(1, 2, rows // 2, 4)
    monkeypatch.delenv("FLASHGEN_BWD_OVERLAP", raising=False)
    assert not streams.wanted(small) and streams.wanted(large) and streams.side_first()
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "0")
    assert not streams.wanted(large)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "2")
    assert streams.wanted(small) and not streams.side_first()
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "1")
    assert streams.wanted(small) and streams.side_first()


def test_deterministic_mode_skips_the_fill_of_written_buffers(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) the split kind allocates delta, dQ, dK
    and dV without PyTorch's NaN fill (its kernels write every element) and leaves the fill
    switched on for everything else; the gradients are those of the normal mode."""
    import torch.utils.deterministic as det

    q, k, v, do = make_inputs(1, 4, 2, 45, 37, 64, F16, seed=25)
    plain = kernel_grads(q, k, v, do, causal=True)
    seen = []
    real = torch.empty_like

    def spy(*args, **kwargs):
        seen.append(det.fill_uninitialized_memory)
        return real(*args, **kwargs)

    torch.use_deterministic_algorithms(True)
    try:
        monkeypatch.setattr(torch, "empty_like", spy)
        got = kernel_grads(q, k, v, do, causal=True)
        monkeypatch.setattr(torch, "empty_like", real)
        assert det.fill_uninitialized_memory and torch.isnan(torch.empty(2)).all()
    finally:
        torch.use_deterministic_algorithms(False)
    assert seen.count(False) == 4 and True not in seen  # delta, dq, dk, dv
    for a, b in zip(plain, got, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("order", ["1", "2"])
def test_overlap_switch_keeps_results(monkeypatch, order):
    """The switch on and off give the same bits (CPU: the sequential path both times)."""
    q, k, v, do = make_inputs(1, 4, 2, 45, 37, 64, F16, seed=21)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "0")
    plain = kernel_grads(q, k, v, do, causal=True)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", order)
    overlapped = kernel_grads(q, k, v, do, causal=True)
    for a, b in zip(plain, overlapped, strict=True):
        assert torch.equal(a, b)
    assert_grads_close(overlapped, q, k, v, do, causal=True)


# The GPU tests run the public op's kernels (records, as benchmarks/bwd_grid.py checks them) on
# its check shape: a GPU job that ran that script first finds every kernel compiled.
GPU_SHAPE = (2, 8, 2, 333, 301)


def _op_grads(q, k, v, do, causal):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    attention(*leaves, causal=causal).backward(do)
    return [t.grad for t in leaves]


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["1", "2"], ids=["dq-first", "dkdv-first"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128], ids=lambda d: f"d{d}")
def test_overlap_bit_identical_gpu(monkeypatch, d, causal, order):
    q, k, v, do = make_inputs(*GPU_SHAPE, d, BF16, seed=22)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "0")
    plain = _op_grads(q, k, v, do, causal)
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", order)
    assert streams.side_stream(q) is not None
    overlapped = _op_grads(q, k, v, do, causal)
    for a, b in zip(plain, overlapped, strict=True):
        assert torch.equal(a, b)
    assert_grads_close(overlapped, q, k, v, do, causal=causal)


@pytest.mark.gpu
def test_overlap_off_in_graph_capture_gpu(monkeypatch):
    """Inside capture the dQ kernel stays on the capturing stream; the replay matches eager."""
    monkeypatch.setenv("FLASHGEN_BWD_OVERLAP", "1")
    q, k, v, do = make_inputs(*GPU_SHAPE, 64, BF16, seed=23)
    _, out, lse = reference_grads(q, k, v, do, causal=True)
    out, lse = out.to(q.dtype), lse.float()

    def grads():
        return backward(do, q, k, v, out, lse, causal=True, scale=64**-0.5, deterministic=True)

    eager = grads()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        grads()  # the plan is built outside capture (records), as CUDA-graph users warm up
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert streams.side_stream(q) is None
        captured = grads()
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(eager, captured, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_deterministic_mode_bit_identical_gpu(causal):
    """torch.use_deterministic_algorithms(True) through the public op: three forward+backward
    runs give the same gradient bits (bf16 GQA, ragged, several blocks per program)."""
    q, k, v, do = make_inputs(*GPU_SHAPE, 128, BF16, seed=24)
    torch.use_deterministic_algorithms(True)
    try:
        runs = [_op_grads(q, k, v, do, causal) for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(False)
    for later in runs[1:]:
        for a, b in zip(runs[0], later, strict=True):
            assert torch.equal(a, b)
    assert_grads_close(runs[0], q, k, v, do, causal=causal)
