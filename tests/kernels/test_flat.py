"""A masked route's flat call (`flashgen.kernels.flat`), on the CPU: its launches are recorded,
not run (the flat call exists only for kernels Triton 3.6's C launcher runs; the GPU tests are in
tests/runtime/test_routes.py). What it passes must be exactly what the Hopper plan's launch
passes for the same call (`hopper.call_args`, which tests/kernels/test_hopper.py ties to the
kernel's signature and to the plan's own launch), and the key range's launch what `key_hull`
passes; and `flat_launch` must refuse every plan it does not handle.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from flashgen.kernels import flat, hopper, padding
from flashgen.kernels.launch import RawLaunch
from flashgen.kernels.plans import clamp_window, plan_spec

CASES = [  # (causal, window, softcap, mask dtype, the key range as bounds)
    (False, None, None, torch.bool, True),
    (True, None, None, torch.bool, True),
    (False, (64, 64), None, torch.bool, True),
    (False, None, 30.0, torch.float32, True),
    (True, (32, 0), 50.0, torch.bfloat16, True),
    (False, (5, 9), None, torch.bool, False),
]


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, stream, args):
        self.calls.append((stream, args))


def _case(mask_dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 300, 4, 64, generator=gen).to(torch.bfloat16).transpose(1, 2)
    k, v = (torch.randn(2, 2, 280, 64, generator=gen).to(torch.bfloat16) for _ in range(2))
    keep = torch.arange(280)[None, None, None, :] < torch.tensor([280, 200])[:, None, None, None]
    if mask_dtype == torch.bool:
        attn_mask = keep
    else:
        attn_mask = torch.zeros(keep.shape, dtype=mask_dtype).masked_fill(~keep, -1e4)
    return q, k, v, attn_mask, attn_mask.expand(2, 4, 300, 280)


@pytest.mark.parametrize("causal,window,softcap,mask_dtype,hulled", CASES)
def test_the_flat_call_passes_what_the_hopper_launch_passes(causal, window, softcap, mask_dtype,
                                                            hulled, monkeypatch):  # fmt: skip
    counter = torch.zeros(1, dtype=torch.int32)
    monkeypatch.setattr(flat, "raw_stream", lambda index: 1234)
    monkeypatch.setattr(flat, "stream_counter", lambda device, stream: counter)
    monkeypatch.setattr(hopper, "sched_counter", lambda device: counter)
    q, k, v, attn_mask, mask = _case(mask_dtype)
    window = clamp_window(window, causal, 300, 280)
    kind = "bool" if mask_dtype == torch.bool else "add"
    spec = plan_spec(q, "fwd", causal, window is not None, softcap is not None, hulled, kind,
                     False)  # fmt: skip
    plan = SimpleNamespace(device=q.device, lse_shape=(2, 4, 300), tail=hopper.sizes(q, k),
                           tma_mask=None)  # fmt: skip
    main, hull = _Recorder(), _Recorder() if hulled else None
    tail = padding.hull_launch(mask)[1] if hulled else ()
    call = flat.FlatLaunch(main, hull, tail, plan, window, softcap, mask)
    out, lse = call(q, k, v, attn_mask, 0.11)
    ((stream, got),) = main.calls
    assert stream == 1234 and got[3] is out and got[4] is lse
    assert out.shape == q.shape and out.stride() == torch.empty_like(q).stride()
    assert lse.shape == (2, 4, 300) and lse.dtype == torch.float32
    bounds = None
    if hulled:
        ((stream, hull_args),) = hull.calls
        bounds = hull_args[1]
        assert stream == 1234 and hull_args[0] is attn_mask and bounds.shape == (2, 4)
        assert bounds.dtype == torch.int32 and hull_args[2:] == tail
    want = hopper.call_args(spec, q, k, v, out, lse, 0.11, window, softcap, bounds, mask)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        if isinstance(b, torch.Tensor):  # the caller's mask for its expanded view: one address
            assert isinstance(a, torch.Tensor) and a.data_ptr() == b.data_ptr(), (a, b)
        else:
            assert a == b and type(a) is type(b), (a, b)


def test_the_key_range_tail_is_the_one_key_hull_launches(monkeypatch):
    """`hull_launch`'s tail is what `key_hull` passes after the keys and the output."""
    seen = []
    _, _, _, _, mask = _case(torch.float32)
    launch, tail = padding.hull_launch(mask)
    monkeypatch.setattr(type(launch), "__call__", lambda self, *args: seen.append(args))
    padding.key_hull(mask)
    ((keys, out, *rest),) = seen
    assert keys.data_ptr() == mask.data_ptr() and out.shape == (2, 4) and tuple(rest) == tail


def _plan(**changes):
    fields = dict(device=torch.device("cuda", 0), hopper=object(), split=None, ranges=False,
                  tma_mask=None, run=SimpleNamespace(fast=object.__new__(RawLaunch)))  # fmt: skip
    fields.update(changes)
    return SimpleNamespace(**fields)


def test_flat_launch_takes_only_what_it_handles():
    _, _, _, attn_mask, mask = _case(torch.bool)
    raw = SimpleNamespace(fast=object.__new__(RawLaunch))
    assert flat.flat_reason(_plan(), (raw, ()), mask, attn_mask) is None
    assert flat.flat_reason(_plan(), None, mask, attn_mask) is None
    refused = [  # (the plan, what the reason says)
        (_plan(hopper=None), "not the Hopper family"),
        (_plan(split=object()), "a tail split"),
        (_plan(ranges=True), "mask ranges"),
        (_plan(tma_mask=2), "mask descriptor"),
        (_plan(run=SimpleNamespace(fast=None)), "attention launch is not a RawLaunch"),
        (_plan(device=torch.device("cpu")), "no device index"),
    ]
    for plan, words in refused:
        reason = flat.flat_reason(plan, None, mask, attn_mask)
        assert reason is not None and words in reason, (words, reason)
        assert flat.flat_launch(plan, None, None, None, mask, attn_mask) is None
    assert "key range" in flat.flat_reason(_plan(), (SimpleNamespace(fast=None), ()), mask,
                                           attn_mask)  # fmt: skip
    # a mask copied, not viewed: the kernels would read the caller's tensor instead
    assert "start" in flat.flat_reason(_plan(), None, mask.contiguous(), attn_mask)
