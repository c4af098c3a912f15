"""The Hopper family's knobs as an Optuna search space, and a small search over them.

Why apart from `space.Space`: the portable family's space is four integers stored in the
tuning database (`TileConfig`); the Hopper family's config (`HopperConfig`) has other knobs:
tile sizes, ring slots, consumer warpgroups with their register split (the launch register
cap), ping-pong, persistent grid (static or dynamic), PV's wait pinned after the softmax
(`late_wait`), the persistent grid's last round split over key tiles (`tail_split`).
`HopperSpace` maps them to categorical Optuna parameters and back, and
prunes with `flashgen.hardware.hopper_tiles` (shared memory, registers) before anything is
compiled, as `Space` does with the SRAM model. `search` runs a study over one shape with any
`evaluate(cfg) -> ms` (the GPU timing in benchmarks/hopper_tune.py; a fake in the CPU
tests). The winners are shipped as `flashgen.kernels.hopper` tables, not as database
records (the records' schema holds portable configs only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..core.hopper_config import HopperConfig

PARAMS = (
    "layout", "block_n", "num_buf", "pingpong", "persistent", "dynamic", "late_wait", "tail_split"
)  # fmt: skip


def layout_name(cfg: HopperConfig) -> str:
    """Consumers, warps per consumer and launch register cap in one categorical value (they
    only make sense together: the cap follows from the threads)."""
    return f"c{cfg.consumers}w{cfg.num_warps}r{cfg.maxnreg}"


class HopperSpace:
    """The categorical choices for one head dim and the fit test for the target device."""

    def __init__(self, head_dim: int, device, candidates: Sequence[HopperConfig] | None = None):
        from ..hardware import hopper_tiles

        self.head_dim = head_dim
        self.device = device
        self.candidates = list(dict.fromkeys(candidates or hopper_tiles.candidates(head_dim)))
        self._by_params = {self._key(c): c for c in self.candidates}
        self.choices = {
            "layout": sorted({layout_name(c) for c in self.candidates}),
            "block_n": sorted({c.block_n for c in self.candidates}),
            "num_buf": sorted({c.num_buf for c in self.candidates}),
            "pingpong": sorted({c.pingpong for c in self.candidates}),
            "persistent": sorted({c.persistent for c in self.candidates}),
            "dynamic": sorted({c.dynamic for c in self.candidates}),
            "late_wait": sorted({c.late_wait for c in self.candidates}),
            "tail_split": sorted({c.tail_split for c in self.candidates}),
        }

    @staticmethod
    def _key(cfg: HopperConfig) -> tuple:
        return (layout_name(cfg), cfg.block_n, cfg.num_buf, cfg.pingpong, cfg.persistent,
                cfg.dynamic, cfg.late_wait, cfg.tail_split)  # fmt: skip

    def prune_reason(self, cfg: HopperConfig | None) -> str | None:
        from ..hardware.hopper_tiles import fit_reason

        if cfg is None or self._key(cfg) not in self._by_params:
            return "not a candidate of flashgen.hardware.hopper_tiles"
        return fit_reason(cfg, self.head_dim, self.device)

    def fitting(self) -> list[HopperConfig]:
        return [c for c in self.candidates if self.prune_reason(c) is None]

    def params(self, cfg: HopperConfig) -> dict | None:
        """Optuna params for `cfg` (to enqueue it), or None when it is not in the space."""
        key = self._key(cfg)
        return dict(zip(PARAMS, key, strict=True)) if key in self._by_params else None

    def suggest(self, trial) -> HopperConfig | None:
        """The config of the trial's choices; None for a combination that is no config
        (ping-pong without two consumers, a dynamic grid or a split last round that is not
        persistent)."""
        key = tuple(trial.suggest_categorical(p, self.choices[p]) for p in PARAMS)
        return self._by_params.get(key)


@dataclass
class SearchResult:
    best: HopperConfig | None = None
    best_ms: float = math.inf
    evaluated: dict[HopperConfig, float] = field(default_factory=dict)
    pruned: int = 0


def search(
    space: HopperSpace,
    evaluate: Callable[[HopperConfig], float],
    n_trials: int,
    *,
    seeds: Sequence[HopperConfig] = (),
    seed: int = 0,
) -> SearchResult:
    """TPE over the space for one shape: `seeds` first (e.g. the shipped config), then what the
    sampler proposes. `space` may be any object with this class's `params`, `suggest` and
    `prune_reason` (the backward's `hopper_bwd_space.HopperBwdSpace` is one). A config that does not fit or is no config is pruned before `evaluate`;
    a failing evaluation (an exception, or a non-finite time) costs inf, never the search; a
    config already evaluated is answered from memory."""
    import optuna

    result = SearchResult()
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, n_trials))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    for cfg in seeds:
        params = space.params(cfg)
        if params is not None:
            study.enqueue_trial(params)

    def objective(trial) -> float:
        cfg = space.suggest(trial)
        reason = space.prune_reason(cfg)
        if reason is not None:
            result.pruned += 1
            trial.set_user_attr("pruned", reason)
            raise optuna.TrialPruned(reason)
        if cfg not in result.evaluated:
            try:
                ms = float(evaluate(cfg))
            except Exception as exc:  # a candidate that fails costs inf, never the search
                trial.set_user_attr("error", repr(exc)[:200])
                ms = math.inf
            result.evaluated[cfg] = ms if math.isfinite(ms) and ms > 0 else math.inf
            if result.evaluated[cfg] < result.best_ms:
                result.best, result.best_ms = cfg, result.evaluated[cfg]
        return result.evaluated[cfg]

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.optimize(objective, n_trials=n_trials)
    return result
