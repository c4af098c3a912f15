"""The benchmark harness at tiny sizes in the interpreter: cases, the chunked float64 reference,
checks that catch a wrong implementation, and one benchmarked case end to end."""

from __future__ import annotations

import pytest
import torch

from flashgen.bench import harness
from flashgen.bench.checks import grad_check
from flashgen.bench.harness import Case
from flashgen.kernels.reference import attention_ref, sdpa_same_dtype


def test_case_validates_and_counts_flops():
    case = Case(2, 8, 2, 100, 64, True, "float16")
    assert case.flops("fwd") == 4 * 2 * 8 * 100 * 100 * 64 / 2
    assert case.flops("fwd_bwd") == 3.5 * case.flops("fwd")
    assert case.label() == "B2 H8/2 N100 D64 causal float16"
    with pytest.raises(ValueError, match="multiple of hkv"):
        Case(1, 6, 4, 10, 64, False)
    with pytest.raises(ValueError, match="dtype"):
        Case(1, 4, 4, 10, 64, False, "int8")
    with pytest.raises(ValueError, match="seq"):
        Case(1, 4, 4, 0, 64, False)


def test_case_grid_keeps_tokens_per_batch():
    cases = harness.case_grid(head_dims=[64], seqs=[1024, 4096, 16384], causal=[True],
                              dtypes=["bfloat16"], heads=[(32, 8)], batch_tokens=8192)  # fmt: skip
    assert [(c.batch, c.seq) for c in cases] == [(8, 1024), (2, 4096), (1, 16384)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_chunked_reference_matches_float64_autograd(causal):
    case = Case(2, 6, 2, 37, 16, causal, "float32")
    inputs = harness.make_inputs(case, "cpu", seed=3)
    out, dq, dk, dv = harness.reference(case, inputs, backward=True, chunk=8)
    q, k, v, do = inputs
    leaves = [t[:1].double().requires_grad_() for t in (q, k, v)]
    ref, _ = attention_ref(*leaves, causal=causal)
    ref.backward(do[:1].double())
    group = case.hq // case.hkv
    torch.testing.assert_close(out, ref[0, :group].detach())
    torch.testing.assert_close(dq, leaves[0].grad[0, :group])
    torch.testing.assert_close(dk, leaves[1].grad[0, 0])
    torch.testing.assert_close(dv, leaves[2].grad[0, 0])


def test_check_catches_a_wrong_output_and_gradient():
    case = Case(1, 2, 1, 20, 16, True, "float32")
    inputs = harness.make_inputs(case, "cpu")
    ref = harness.reference(case, inputs, backward=True)
    _, got = harness.runner("sdpa_math", case, "fwd_bwd", inputs)
    ok, errors = harness.check(case, got, ref)
    assert ok and set(errors) == {"out", "dq", "dk", "dv"} and max(errors.values()) < 1e-5
    bad = list(got)
    bad[2] = got[2].clone()
    bad[2][0, 0, 5] += 0.1  # one key row of dK off
    ok, errors = harness.check(case, bad, ref)
    assert not ok and errors["dk"] > 1e-2


def test_the_scripts_grid_is_the_issue_grid():
    """16k tokens a batch at 1k/4k/16k, head dims 128 and 64, GQA 32/8; the probe is its 4k row."""
    shapes = harness.ANCHOR_SHAPES
    assert len(set(shapes)) == 9 and all(b * n == 16384 for b, _, _, n, _ in shapes)
    assert {(hq, hkv, d) for _, hq, hkv, _, d in shapes} == {
        (16, 16, 128),
        (32, 32, 64),
        (32, 8, 128),
    }
    assert harness.PROBE_SHAPES == (
        (4, 16, 16, 4096, 128),
        (4, 32, 32, 4096, 64),
        (4, 32, 8, 4096, 128),
    )


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_grad_check_passes_sdpa_and_catches_a_wrong_gradient(causal):
    """The GPU scripts' whole-tensor gradient check: PyTorch's own float16 gradients pass, the
    same with one dV row off fail, and a gradient not computed (None) is skipped."""
    gen = torch.Generator().manual_seed(5)
    q, k, v, do = (torch.randn(1, 4, 37, 16, generator=gen).half() for _ in range(4))
    k, v = k[:, :2], v[:, :2]  # GQA 4/2
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    sdpa_same_dtype(*leaves, causal=causal).backward(do)
    got = [t.grad for t in leaves]
    ok, errors = grad_check(got, q, k, v, do, causal=causal)
    assert ok and set(errors) == {"dq", "dk", "dv"}
    assert all(err <= bound for err, bound in errors.values())
    wrong = [got[0], None, got[2].clone()]
    wrong[2][0, 1, 3] += 0.5
    ok, errors = grad_check(wrong, q, k, v, do, causal=causal)
    assert not ok and set(errors) == {"dq", "dv"} and errors["dv"][0] > errors["dv"][1]


def test_bench_case_times_checks_and_skips(monkeypatch):
    case = Case(1, 4, 2, 33, 16, True, "float32")
    seen = []
    rows = harness.bench_case(
        case, ["fwd", "fwd_bwd"], ["flashgen", "sdpa_math", "sdpa_efficient"], device="cpu",
        timer=harness.wall_timer(1), rounds=1, on_row=seen.append,
    )  # fmt: skip
    assert len(rows) == len(seen) == 6
    by = {(r.mode, r.impl): r for r in rows}
    for mode in ("fwd", "fwd_bwd"):
        for impl in ("flashgen", "sdpa_math"):
            row = by[(mode, impl)]
            assert row.ok is True and row.ms > 0 and row.tflops > 0, row
            assert row.readings == [row.ms]  # one round: its reading is the median
        skipped = by[(mode, "sdpa_efficient")]  # no such kernel on the CPU
        assert skipped.ms is None and skipped.ok is None and skipped.note
        assert skipped.readings == []
    assert set(by[("fwd_bwd", "flashgen")].errors) == {"out", "dq", "dk", "dv"}
    assert harness.fastest_other(rows, by[("fwd", "flashgen")]).impl == "sdpa_math"
    flat = by[("fwd", "flashgen")].flat()
    assert flat["seq"] == 33 and flat["impl"] == "flashgen" and flat["max_rel_err"] < 1e-4


def test_bench_case_reverses_every_other_round():
    """No impl always takes the same place in a round (first after the round before's last
    backend, or last): rounds alternate the order; each impl keeps its own readings."""
    case = Case(1, 2, 2, 16, 16, False, "float32")
    calls = []

    def timer(fn):
        calls.append(fn)
        return float(len(calls))

    rows = harness.bench_case(case, ["fwd"], ["flashgen", "sdpa_math"], device="cpu",
                              timer=timer, rounds=3)  # fmt: skip
    assert len(calls) == 6 and calls[0] is not calls[1]
    assert calls[2:4] == calls[1::-1] and calls[4:6] == calls[0:2]
    flashgen, math_row = rows
    assert flashgen.readings == [1.0, 4.0, 5.0] and math_row.readings == [2.0, 3.0, 6.0]


def test_an_sdpa_backend_again_is_a_row_of_its_own():
    """`<sdpa backend>_again` (the A/A control) runs that backend as a separate row, checked and
    timed like it; other names with the suffix stay unknown."""
    case = Case(1, 2, 2, 16, 16, True, "float32")
    rows = harness.bench_case(case, ["fwd"], ["sdpa_math", "sdpa_math" + harness.AGAIN],
                              device="cpu", timer=lambda fn: 1.0, rounds=2)  # fmt: skip
    assert [r.impl for r in rows] == ["sdpa_math", "sdpa_math_again"]
    assert all(r.ok and r.readings == [1.0, 1.0] for r in rows)
    inputs = harness.make_inputs(case, "cpu")
    a = harness.attention_fn("sdpa_math", case)(*inputs[:3])
    assert torch.equal(harness.attention_fn("sdpa_math_again", case)(*inputs[:3]), a)
    with pytest.raises(ValueError, match="impl must be one of"):
        harness.attention_fn("flashgen_again", case)


def test_bench_case_marks_a_wrong_implementation(monkeypatch):
    real = harness.attention_fn

    def broken(impl, case):
        fn = real("sdpa_math", case)
        return (lambda q, k, v: fn(q, k, v) * 1.01) if impl == "flashgen" else fn

    monkeypatch.setattr(harness, "attention_fn", broken)
    case = Case(1, 2, 2, 16, 16, False, "float32")
    rows = harness.bench_case(case, ["fwd"], ["flashgen", "sdpa_math"], device="cpu",
                              timer=harness.wall_timer(1), rounds=1)  # fmt: skip
    assert [r.ok for r in rows] == [False, True]


def test_alternate_times_every_run_in_turn():
    """`harness.alternate`: each (mode, run) callable made once, called once untimed, then
    timed once a round in turn; medians, the first run's median over the others', and the
    median of the rounds' back-to-back ratios."""
    calls: list[str] = []
    made: list[str] = []

    def make(fn):
        made.append(fn)
        return lambda: calls.append(fn)

    times = iter([2.0, 1.0, 2.0, 4.0, 6.0, 3.0])  # (a, b) per round

    def timer(call):
        call()
        return next(times)

    got = harness.alternate({"a": "A", "b": "B"}, {"fwd": make}, timer, rounds=3)
    assert made == ["A", "B"]
    assert calls == ["A", "B"] + ["A", "B"] * 3  # the untimed first calls, then alternating
    assert got["readings"] == {("fwd", "a"): [2.0, 2.0, 6.0], ("fwd", "b"): [1.0, 4.0, 3.0]}
    assert got["ms"] == {("fwd", "a"): 2.0, ("fwd", "b"): 3.0}
    assert got["ratio"] == {("fwd", "b"): 2.0 / 3.0}
    assert got["paired"] == {("fwd", "b"): 2.0}  # rounds' ratios 2.0, 0.5, 2.0


def test_gpu_or_smoke_without_cuda(monkeypatch, capsys):
    """Without CUDA: a smoke run gets False (the interpreter on), any other run None and the
    reason on stderr (the scripts exit with status 2)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert harness.gpu_or_smoke(smoke=False) is None
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert harness.gpu_or_smoke(smoke=True) is False


def test_host_us_times_calls_between_syncs(monkeypatch):
    """`host_us`: the warm-up calls, then `rounds` rounds of `calls` calls between synchronisations,
    the median of the rounds' µs per call (a fake clock: 2 µs a call, a slow round in the
    middle that the median ignores)."""
    clock = {"t": 0.0, "calls": 0, "syncs": 0}

    def fn():
        clock["calls"] += 1
        clock["t"] += 2e-6 if clock["calls"] != 7 else 1e-3  # round 2 holds the slow call

    def sync():
        clock["syncs"] += 1

    monkeypatch.setattr(harness.time, "perf_counter", lambda: clock["t"])
    got = harness.host_us(fn, calls=3, rounds=3, sync=sync, warmup=2)
    assert clock["calls"] == 2 + 3 * 3
    assert clock["syncs"] == 1 + 3 + 1
    assert got == pytest.approx(2.0)


def test_identity_node_passes_values_and_gradients_through():
    """`harness.identity_node`, the Python autograd node the host-time scripts read flashgen's
    beside: the value and the gradient unchanged, one node recorded, a new class a call."""
    node = harness.identity_node()
    x = torch.randn(3, requires_grad=True)
    y = node.apply(x)
    assert torch.equal(y, x) and y.grad_fn is not None
    (g,) = torch.autograd.grad(y, x, torch.tensor([1.0, 2.0, 3.0]))
    assert g.tolist() == [1.0, 2.0, 3.0]
    assert harness.identity_node() is not node
