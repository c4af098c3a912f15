"""`flashgen.kernels.bwd_kind.for_call`: the kind one backward call runs (the rules of
`resolve_kind` are tested with the one-pass kind, tests/kernels/test_backward_onepass.py)."""

from __future__ import annotations

import pytest

from flashgen.core.spec import KernelSpec
from flashgen.kernels import bwd_kind, hopper_bwd

PLAIN = KernelSpec(128, False, "bfloat16", "bwd")


@pytest.fixture(autouse=True)
def no_kind_env(monkeypatch):
    monkeypatch.delenv(bwd_kind.KIND_ENV, raising=False)


def test_split_only_wins_over_any_asked_kind():
    for kind in (None, "split", "onepass", "hopper"):
        assert bwd_kind.for_call(False, kind, PLAIN, 4096, split_only=True) == "split"
    assert bwd_kind.for_call(False, "onepass", PLAIN, 4096, split_only=False) == "onepass"


def test_a_wrong_request_is_refused_even_when_split_only():
    """`resolve_kind` checks the request first: a call that would run the split kind anyway
    still hears that its kind argument was wrong."""
    with pytest.raises(ValueError, match="kind must be one of"):
        bwd_kind.for_call(False, "fused", PLAIN, 4096, split_only=True)
    with pytest.raises(ValueError, match="not deterministic"):
        bwd_kind.for_call(True, "onepass", PLAIN, 4096, split_only=True)


def test_hopper_only_where_auto_lists_the_shape_and_the_kind_was_left_open(monkeypatch):
    monkeypatch.setattr(hopper_bwd, "AUTO", {(128, False): 2048})
    assert bwd_kind.for_call(False, None, PLAIN, 4096, split_only=False) == "hopper"
    assert bwd_kind.for_call(False, None, PLAIN, 1024, split_only=False) == bwd_kind.DEFAULT_KIND
    assert bwd_kind.for_call(False, "split", PLAIN, 4096, split_only=False) == "split"
    assert bwd_kind.for_call(True, None, PLAIN, 4096, split_only=False) == "split"
    assert bwd_kind.for_call(False, None, PLAIN, 4096, split_only=True) == "split"
    monkeypatch.setenv(bwd_kind.KIND_ENV, "split")
    assert bwd_kind.for_call(False, None, PLAIN, 4096, split_only=False) == "split"


@pytest.mark.parametrize(
    "extras",
    [dict(lengths=True), dict(attn_mask="bool"), dict(lengths=True, attn_mask="add"),
     dict(window=True), dict(window=True, dropout=True, softcap=True)],
    ids=["lengths", "mask", "key-padding mask", "window", "window-dropout-softcap"],
)  # fmt: skip
def test_each_kind_answers_for_the_extras_it_has(monkeypatch, extras):
    """The call's whole spec decides: the one-pass kind has no lengths or mask tensors (asked
    for by argument: refused; by FLASHGEN_BWD_KIND: split); the hopper kind has lengths and
    key-padding masks with them, not a mask tensor alone, and windows, not dropout with
    softcap."""
    spec = KernelSpec(128, False, "bfloat16", "bwd", **extras)
    assert not bwd_kind.onepass_supported(spec)
    with pytest.raises(ValueError, match="kind='onepass' has no kernel"):
        bwd_kind.for_call(False, "onepass", spec, 4096, split_only=False)
    monkeypatch.setenv(bwd_kind.KIND_ENV, "onepass")
    assert bwd_kind.for_call(False, None, spec, 4096, split_only=False) == "split"
    monkeypatch.setenv(bwd_kind.KIND_ENV, "hopper")
    hopper = hopper_bwd.spec_reason(spec) is None
    assert hopper == bool((spec.lengths or spec.window) and not (spec.dropout and spec.softcap))
    if hopper:  # resolved from the spec; the GPU and tensors are asked at the launch
        assert bwd_kind.for_call(False, None, spec, 4096, split_only=False) == "hopper"
    assert bwd_kind.for_call(False, None, spec, 4096, split_only=True) == "split"
