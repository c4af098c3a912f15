"""The Hopper family's Optuna space and search (flashgen.tune.hopper_space), with a fake timer."""

from __future__ import annotations

import math

import pytest

from flashgen.core.hopper_config import HopperConfig
from flashgen.hardware import hopper_tiles as ht
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.tune.hopper_space import HopperSpace, layout_name, search

pytest.importorskip("optuna")
H200 = KNOWN_GPUS["nvidia-h200"]


def test_params_round_trip():
    space = HopperSpace(128, H200)

    class Trial:
        def __init__(self, params):
            self.params = params

        def suggest_categorical(self, name, choices):
            assert self.params[name] in choices
            return self.params[name]

    for cfg in space.candidates:
        assert space.suggest(Trial(space.params(cfg))) == cfg
    assert set(space.choices["layout"]) >= {"c2w4r168", "c1w4r128", "c3w4r128"}
    # a dynamic grid only with a persistent one
    assert any(c.dynamic for c in space.candidates)
    assert all(c.persistent for c in space.candidates if c.dynamic)
    assert space.suggest(Trial({**space.params(space.candidates[0]), "dynamic": True,
                                "persistent": False})) is None  # fmt: skip


def test_search_finds_the_fake_optimum_and_never_times_a_misfit():
    space = HopperSpace(128, H200)
    target = HopperConfig(128, 64, 3, 2, 4, 168, False, True)
    timed = []

    def fake_ms(cfg):
        assert ht.fit_reason(cfg, 128, H200) is None  # pruned configs never reach the timer
        timed.append(cfg)
        if cfg.num_buf == 4:
            raise RuntimeError("pretend compile failure")
        return (
            1.0
            + (cfg.block_n != 64)
            + (cfg.num_buf != 3)
            + (layout_name(cfg) != "c2w4r168")
            + (not cfg.persistent)
            + 0.5 * cfg.pingpong
            + 0.25 * cfg.dynamic
            + 0.125 * cfg.late_wait
            + 0.0625 * (cfg.tail_split > 1)
        )

    shipped = HopperConfig(128, 128, 2, 2, 4, 168, False)
    res = search(space, fake_ms, n_trials=60, seeds=[shipped], seed=1)
    assert timed[0] == shipped  # seeds first
    assert res.best == target and res.best_ms == 1.0
    assert len(timed) == len(set(timed))  # a config is timed once
    assert all(math.isinf(ms) for c, ms in res.evaluated.items() if c.num_buf == 4)
