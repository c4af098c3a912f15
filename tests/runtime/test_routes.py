"""The masked forward's per-signature routes (`flashgen.runtime.routes`), on the CPU interpreter.

A route is kept after the full path ran a masked call, and the next call with the same signature
(other mask values, another scale) takes it: what it returns equals float64 for every mask kind
the full path takes (a key-padding vector, HF's [B, 1, Sq, Sk] stride-0 view, a 2-D mask, an
additive mask, with causal, a window and softcap). Calls that differ in what the decisions read
get their own route; calls with lengths, dropout, ALiBi, a bottom-right alignment or a decode
step get none; routes go with the run-time choice's caches, and one whose plan is gone sends the
call down the full path; a route's flat call (GPU only, a stand-in here) is taken unless it gives
None or a Triton launch hook is attached. The GPU tests run the same in bf16, and the flat call
itself on a Hopper GPU.
"""

from __future__ import annotations

import pytest
import torch

import flashgen.runtime.primitives  # noqa: F401 (registers the primitive ops)
from flashgen.kernels import flat, fwd, padding
from flashgen.kernels.reference import hidden_ref, rows_ref, scores_ref
from flashgen.runtime import dispatch, primitives, routes

OP = torch.ops.flashgen.attention_fwd


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """Fresh routes, and every config settled: the launcher keeps a plan (so a route) only for
    a settled config, and under pytest-xdist the workers' shared test database can be locked
    while another worker creates it, the choice then a fallback asked again later."""
    monkeypatch.setattr(routes, "_routes", {})
    monkeypatch.setattr(dispatch, "settled", lambda *a: True)


def _ref(q, k, v, mask, scale, causal=False, window=None, softcap=None):
    s = scores_ref(q.double(), k.double(), scale=scale, softcap=softcap)
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    s = s.masked_fill(hidden_ref(q.shape[2], k.shape[2], causal=causal, window=window),
                      float("-inf"))  # fmt: skip
    return rows_ref(s, v.double())


def _qkv(seed, b=2, hq=2, hkv=1, sq=37, sk=45, d=16):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, s, d, generator=gen) for h, s in ((hq, sq), (hkv, sk), (hkv, sk))]


def _keys(b, sk, seed, additive=False):
    """A [B, 1, 1, Sk] key-padding mask, each entry keeping a prefix: entry 0's grows with
    `seed` (a key range kept from an earlier call would hide keys), the others' shrink."""
    keep = torch.zeros(b, 1, 1, sk, dtype=torch.bool)
    for i in range(b):
        length = 5 + 7 * seed if i == 0 else sk - 3 * i - seed
        keep[i, ..., : max(1, min(length, sk))] = True
    if additive:
        return torch.zeros(keep.shape).masked_fill(~keep, torch.finfo(torch.float32).min)
    return keep


def _count_full_path(monkeypatch) -> list:
    """One entry per call that took the full path (it expands the mask; a route does not)."""
    taken = []
    expand = primitives.expand_mask
    monkeypatch.setattr(primitives, "expand_mask", lambda *a: taken.append(1) or expand(*a))
    return taken


def _masks(kind, b, sq, sk, seed, device="cpu"):
    """A mask of `kind` on `device` (the "hf" view expanded there: moving an expanded tensor
    to another device makes it dense)."""
    if kind == "keys":
        return _keys(b, sk, seed).to(device)
    if kind == "hf":  # HF's encoders: `(q_idx >= 0) & padding[b, kv_idx]`, a stride-0 view
        return _keys(b, sk, seed).to(device).expand(b, 1, sq, sk)
    if kind == "additive":
        return _keys(b, sk, seed, additive=True).to(device)
    gen = torch.Generator().manual_seed(seed)  # "2d": any boolean [Sq, Sk] (a row may see none)
    return (torch.rand(sq, sk, generator=gen) > 0.3).to(device)


CASES = [  # (mask kind, causal, window, softcap)
    ("keys", False, None, None),
    ("hf", False, (5, 5), None),
    ("hf", True, None, None),
    ("additive", False, None, 30.0),
    ("2d", True, (9, 0), None),
]


@pytest.mark.parametrize("kind,causal,window,softcap", CASES)
def test_the_second_call_takes_the_route_and_matches_float64(kind, causal, window, softcap,
                                                            monkeypatch):  # fmt: skip
    taken = _count_full_path(monkeypatch)
    q, k, v = _qkv(1)
    b, sq, sk = q.shape[0], q.shape[2], k.shape[2]
    win = None if window is None else list(window)
    for call, scale in enumerate((0.25, 0.4, 0.3)):
        mask = _masks(kind, b, sq, sk, seed=call)  # other values every call
        out, lse = OP(q, k, v, causal, scale, win, softcap, "top_left", None, mask)
        full = mask.expand(b, 1, sq, sk) if mask.dim() == 4 else mask
        want, want_lse = _ref(q, k, v, full, scale, causal, window, softcap)
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=1e-4)
        seen = torch.isfinite(want_lse)
        torch.testing.assert_close(lse.double()[seen], want_lse[seen], atol=2e-5, rtol=1e-4)
    assert len(taken) == 1 and len(routes._routes) == 1  # the first call only


def test_what_the_decisions_read_keys_its_own_route(monkeypatch):
    """Another mask layout, dtype, window, cap, causal flag, alignment or forward-family
    override: a call of its own through the full path; the same signature again: the route."""
    taken = _count_full_path(monkeypatch)
    q, k, v = _qkv(2)
    keys = _keys(2, 45, 3)
    base = (q, k, v, False, 0.25, None, None, "top_left", None, keys)
    OP(*base)
    OP(*base)
    assert len(taken) == 1
    unaligned = torch.randn(2 * 2 * 37 * 16 + 1)[1:].view(q.shape)  # 4-byte, not 16-byte
    variants = [
        (q, k, v, False, 0.25, None, None, "top_left", None, keys.expand(2, 1, 37, 45)),
        (q, k, v, False, 0.25, None, None, "top_left", None, keys.float()),
        (q, k, v, False, 0.25, [4, 4], None, "top_left", None, keys),
        (q, k, v, False, 0.25, [4, 6], None, "top_left", None, keys),
        (q, k, v, False, 0.25, None, 20.0, "top_left", None, keys),
        (q, k, v, True, 0.25, None, None, "top_left", None, keys),
        (unaligned.copy_(q), k, v, False, 0.25, None, None, "top_left", None, keys),
    ]
    for args in variants:
        OP(*args)
    assert len(taken) == 1 + len(variants) == len(routes._routes)
    monkeypatch.setenv("FLASHGEN_FWD_TMA", "0")  # (a forward-family override the choice reads)
    OP(*base)
    assert len(taken) == 2 + len(variants)


def test_calls_outside_the_routes_scope_keep_none():
    """Lengths, dropout, ALiBi, the bottom-right alignment (more keys than queries) and a decode
    step (one query row) take the full path every time and keep no route."""
    q, k, v = _qkv(4)
    keys = _keys(2, 45, 5)
    seed = torch.tensor([7], dtype=torch.int64)
    lengths = torch.tensor([[0, 37, 0, 40], [0, 30, 0, 45]], dtype=torch.int32)
    OP(q, k, v, False, 0.25, None, None, "top_left", lengths)
    OP(q, k, v, False, 0.25, None, None, "top_left", None, keys, 0.2, seed)
    OP(q, k, v, False, 0.25, None, None, "top_left", None, keys, 0.0, None, torch.rand(2))
    OP(q, k, v, True, 0.25, None, None, "bottom_right", None, keys)
    OP(q[:, :, :1], k, v, False, 0.25, None, None, "top_left", None, keys)
    assert routes._routes == {}


def test_routes_go_with_the_run_time_choice_and_a_dropped_plan_takes_the_full_path(
    monkeypatch,
):  # fmt: skip
    taken = _count_full_path(monkeypatch)
    monkeypatch.setattr(dispatch, "_clear_hooks", [routes._routes.clear, fwd._plans.clear])
    q, k, v = _qkv(6)
    args = (q, k, v, False, 0.25, [3, 3], None, "top_left", None, _keys(2, 45, 7))
    want = OP(*args)[0]
    dispatch.clear_cache()
    assert routes._routes == {}
    torch.testing.assert_close(OP(*args)[0], want, atol=0, rtol=0)
    assert len(taken) == 2 and len(routes._routes) == 1
    fwd._plans.clear()  # (the launcher dropped its plans: the route finds none)
    torch.testing.assert_close(OP(*args)[0], want, atol=0, rtol=0)
    assert len(taken) == 3
    torch.testing.assert_close(OP(*args)[0], want, atol=0, rtol=0)
    assert len(taken) == 3


def test_a_route_takes_its_flat_call_unless_a_launch_hook_is_attached(monkeypatch):
    """A route with a flat call (`flashgen.kernels.flat`, GPU only: here a stand-in) returns
    what the flat call returns; where that gives None (a thread without a CUDA context) or a
    Triton launch hook is attached, the route's own path runs the call."""
    taken = _count_full_path(monkeypatch)
    q, k, v = _qkv(3)
    mask = _keys(2, 45, 1)
    args = (q, k, v, False, 0.25, [4, 4], None, "top_left", None, mask)
    want = OP(*args)
    (route,) = routes._routes.values()
    assert route.flat is None  # (the interpreter launches nothing directly)
    calls = []
    marker = (torch.full_like(want[0], 7.0), torch.zeros_like(want[1]))
    route.flat = lambda *a: calls.append(a) or marker
    got = OP(*args)
    assert got[0] is marker[0] and got[1] is marker[1]
    ((fq, fk, fv, fmask, fscale),) = calls
    assert fq is q and fk is k and fv is v and fmask is mask and fscale == 0.25
    route.flat = lambda *a: calls.append(a)  # None: the route's own path
    for a, b in zip(OP(*args), want, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert len(calls) == 2
    monkeypatch.setattr(routes, "hooks_active", lambda: True)
    route.flat = lambda *a: pytest.fail("the flat call ran under a launch hook")
    for a, b in zip(OP(*args), want, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert len(taken) == 1  # every later call by the route


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind,causal,window,softcap", CASES)
def test_routes_on_the_gpu(kind, causal, window, softcap, monkeypatch):
    """The same in bf16 at 1k tokens (below the 1,024 query rows from which an H100/H200 takes
    the Hopper family unforced: the portable kernels, so no key range as bounds on a TMA GPU;
    `test_the_flat_launch_on_the_gpu` runs the Hopper family): three calls, the last two by the
    route."""
    taken = _count_full_path(monkeypatch)
    q, k, v = (t.cuda().to(torch.bfloat16) for t in _qkv(8, b=2, hq=4, hkv=2, sq=1000, sk=1000,
                                                          d=64))  # fmt: skip
    win = None if window is None else list(window)
    for call, scale in enumerate((0.125, 0.2, 0.1)):
        mask = _masks(kind, 2, 1000, 1000, seed=call * 40, device="cuda")
        out, _ = OP(q, k, v, causal, scale, win, softcap, "top_left", None, mask)
        full = mask.expand(2, 1, 1000, 1000) if mask.dim() == 4 else mask
        want, _ = _ref(q.cpu(), k.cpu(), v.cpu(), full.cpu(), scale, causal, window, softcap)
        torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
    assert len(taken) == 1


FLAT_CASES = [  # key-padding masks: the cases whose route launches flat on a Hopper GPU
    ("keys", False, None, None),
    ("hf", False, (64, 64), None),
    ("hf", True, None, None),
    ("additive", False, None, 30.0),
]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind,causal,window,softcap", FLAT_CASES)
def test_the_flat_launch_on_the_gpu(kind, causal, window, softcap, monkeypatch):
    """At 2k tokens an H100/H200 runs a key-padding mask's call on the Hopper family with the
    mask's key range, and its route is one flat call (`flashgen.kernels.flat`): three calls with
    other mask values and scales match float64, the route holds a flat call, and the route's
    own path (the flat call dropped) gives the same bits, out and lse."""
    from flashgen.kernels import hopper

    if torch.cuda.get_device_capability() != (9, 0) or hopper.gluon_api()[0] is None:
        pytest.skip("the Hopper family runs on sm_90 with Gluon only")
    taken = _count_full_path(monkeypatch)
    n = 2048
    q, k, v = (t.cuda().to(torch.bfloat16) for t in _qkv(9, b=2, hq=4, hkv=2, sq=n, sk=n, d=64))
    win = None if window is None else list(window)
    for call, scale in enumerate((0.125, 0.2, 0.1)):
        mask = _masks(kind, 2, n, n, seed=call * 40, device="cuda")
        out, lse = OP(q, k, v, causal, scale, win, softcap, "top_left", None, mask)
        full = mask.expand(2, 1, n, n)
        want, want_lse = _ref(q.cpu(), k.cpu(), v.cpu(), full.cpu(), scale, causal, window,
                              softcap)  # fmt: skip
        torch.testing.assert_close(out.cpu().double(), want, atol=2e-2, rtol=2e-2)
        seen = torch.isfinite(want_lse)
        torch.testing.assert_close(lse.cpu().double()[seen], want_lse[seen], atol=2e-3, rtol=1e-3)
    assert len(taken) == 1
    (route,) = routes._routes.values()
    plan = fwd._plans.get(route.plan_key)
    full = mask.expand(route.full)
    hull = padding.hull_launch(full) if route.hull else None
    assert route.flat is not None, flat.flat_reason(plan, hull, full, mask)
    assert route.hull and route.flat.hull is not None
    by_flat = OP(q, k, v, causal, 0.15, win, softcap, "top_left", None, mask)
    route.flat = None
    own = OP(q, k, v, causal, 0.15, win, softcap, "top_left", None, mask)
    assert len(taken) == 1
    for a, b in zip(by_flat, own, strict=True):
        assert torch.equal(a, b)
