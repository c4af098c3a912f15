"""The Hopper backward kind's Optuna space (flashgen.tune.hopper_bwd_space) and a search over it
with a fake timer (`hopper_space.search`). Its shared-memory model against the compiler:
tests/kernels/test_hopper_bwd.py."""

from __future__ import annotations

import math

import pytest

from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.kernels.hopper_bwd import (
    CONFIGS,
    PLAIN_CONFIGS,
    SHORT_CONFIGS,
    SHORT_MHA_CONFIGS,
    HopperBwdConfig,
)
from flashgen.tune.hopper_bwd_space import PARAMS, HopperBwdSpace, candidates
from flashgen.tune.hopper_space import search

pytest.importorskip("optuna")
H200 = KNOWN_GPUS["nvidia-h200"]


class Trial:
    def __init__(self, params):
        self.params = params

    def suggest_categorical(self, name, choices):
        assert self.params[name] in choices
        return self.params[name]


def test_params_round_trip_and_choices():
    space = HopperBwdSpace(128, H200)
    for cfg in space.candidates:
        assert space.suggest(Trial(space.params(cfg))) == cfg
    assert set(space.choices) == set(PARAMS)
    assert space.choices["dq_tma"] == [False, True] and space.choices["consumers"] == [1, 2]
    # shared dS needs two consumers: that combination is no config
    one = next(c for c in space.candidates if c.consumers == 1)
    assert space.suggest(Trial({**space.params(one), "share_ds": True})) is None
    # the register cap follows from the threads
    assert {(c.consumers, c.maxnreg) for c in candidates()} == {(1, 248), (2, 168)}


@pytest.mark.parametrize("head_dim", [64, 128])
def test_prunes_before_anything_is_compiled(head_dim):
    space = HopperBwdSpace(head_dim, H200)
    fitting = space.fitting()
    assert CONFIGS[head_dim] in fitting
    for table in (PLAIN_CONFIGS, SHORT_MHA_CONFIGS, SHORT_CONFIGS):
        assert all(c in fitting for (d, _), c in table.items() if d == head_dim)
    for cfg in space.candidates:
        reason = space.prune_reason(cfg)
        if cfg.shared_bytes(head_dim) > H200.smem_optin_bytes:
            assert reason is not None
        if cfg.head_dim_reason(head_dim) is not None:
            assert reason == cfg.head_dim_reason(head_dim)
        if reason is None:
            assert cfg.shared_bytes(head_dim) <= H200.smem_optin_bytes
            assert not (head_dim == 128 and cfg.consumers == 1)
    if head_dim == 128:  # four ring slots and fp32 dQ staging outgrow 227 KB there
        assert any("shared memory" in (space.prune_reason(c) or "") for c in space.candidates)
    turns = [c for c in space.candidates if c.dq_turns]
    assert turns and all(c.share_ds for c in turns)
    # in turns, whole 64 x head_dim dQ products a step: at 128 twice the staging bytes, so the
    # deeper rings do not fit beside them, but the shipped rings do
    assert any(space.prune_reason(c) is None for c in turns)
    if head_dim == 128:
        staged = [c for c in turns if c.dq_tma and space.prune_reason(c) is None]
        assert staged and all(
            c.num_buf == 2 and c.dq_chunk(128) * c.dq_split == 128 for c in staged
        )
    assert space.prune_reason(None) is not None
    other = HopperBwdConfig(2, 2, 1, 160, True, False)  # not a candidate (register cap)
    assert "not a candidate" in space.prune_reason(other)


def test_search_finds_the_fake_optimum_and_never_times_a_misfit():
    space = HopperBwdSpace(128, H200)
    target = HopperBwdConfig(2, 3, 1, 168, True, False, dq_tma=True, stats_smem=True)
    timed = []

    def fake_ms(cfg):
        assert space.prune_reason(cfg) is None  # pruned configs never reach the timer
        timed.append(cfg)
        if cfg.persistent and not cfg.dq_tma:
            raise RuntimeError("pretend compile failure")
        penalty = (cfg.num_buf != 3) + (not cfg.share_ds) + (not cfg.dq_tma) + cfg.dq_split - 1
        penalty += (cfg.ds_bufs - 1) + cfg.dynamic  # the target has one dS slot, a static grid
        return 1.0 + penalty + (not cfg.stats_smem)

    shipped = CONFIGS[128]
    res = search(space, fake_ms, n_trials=120, seeds=[shipped], seed=1)
    assert timed[0] == shipped  # seeds first
    assert res.best == target and res.best_ms == 1.0
    assert len(timed) == len(set(timed))  # a config is timed once
    assert all(math.isinf(ms) for c, ms in res.evaluated.items() if c.persistent and not c.dq_tma)
