"""The Hopper backward kind's knobs as an Optuna search space (`flashgen.kernels.hopper_bwd`).

Why apart from `hopper_space.HopperSpace` (the forward's): the backward's config
(`HopperBwdConfig`) has other knobs: consumer warpgroups (with the launch register cap that
follows from the threads), Q/dO ring slots, dQ column chunks, whether the consumers share dS
(half of dQ's columns each), how dQ partials are added (TMA reduce-add or element atomics),
where each step's statistics wait for their use (registers or the consumers' shared-memory
staging, `stats_smem`), whether the consumers take dQ's whole products in turns (`dq_turns`,
with shared dS), how many slots the dS exchange has (`ds_bufs`, shared dS only), a persistent
grid, static or dynamic, how many staging buffers a dQ chunk has (`dq_bufs`), whether dQ's
product goes before dK's (`dq_first`).
`HopperBwdSpace` maps them to categorical parameters and back, and prunes before anything is
compiled: configs the class refuses, a head dim a config cannot split, shared memory past the
device's opt-in limit (`HopperBwdConfig.shared_bytes`, the model the CPU tests hold to the
compiler's byte counts), dQ by TMA reduce-add where the installed Gluon cannot issue it, and
what the H200 showed not to work (single-consumer at head dim 128: ptxas crashed; statistics by
TMA: faulted). `hopper_space.search` runs a study over one shape with any `evaluate(cfg) -> ms`
(the GPU timing in benchmarks/hopper_bwd_tune.py; a fake in the CPU tests).
The winners are shipped as `hopper_bwd.CONFIGS`, not as database records.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from ..core.config import FieldError
from ..kernels.hopper_bwd import REGS_PER_SM, HopperBwdConfig

PARAMS = (
    "consumers",
    "num_buf",
    "dq_split",
    "share_ds",
    "dq_tma",
    "persistent",
    "stats_smem",
    "dq_turns",
    "ds_bufs",
    "dynamic",
    "dq_bufs",
    "dq_first",
)


def _regs(consumers: int) -> int:
    """The launch register cap the threads allow (consumers' warpgroups and the loader's),
    a multiple of 8."""
    return REGS_PER_SM // (128 * (consumers + 1)) // 8 * 8


def candidates() -> tuple[HopperBwdConfig, ...]:
    """Every combination of the knobs the class accepts (any head dim)."""
    out = []
    flag = (False, True)
    knobs = itertools.product((1, 2), (2, 3, 4), (1, 2), *[flag] * 5, (1, 2), flag, (1, 2), flag)
    for consumers, num_buf, dq_split, *rest in knobs:
        share, tma, persistent, staged, turns, ds_bufs, dynamic, dq_bufs, first = rest
        try:
            cfg = HopperBwdConfig(consumers, num_buf, dq_split, min(_regs(consumers), 248),
                                  share, False, persistent, dq_tma=tma, stats_smem=staged,
                                  dq_turns=turns, ds_bufs=ds_bufs, dynamic=dynamic,
                                  dq_bufs=dq_bufs, dq_first=first)  # fmt: skip
        except FieldError:  # e.g. shared dS with one consumer
            continue
        out.append(cfg)
    return tuple(out)


class HopperBwdSpace:
    """The categorical choices for one head dim and the fit test for the target device."""

    def __init__(self, head_dim: int, device, candidates_: Sequence[HopperBwdConfig] = ()):
        self.head_dim = head_dim
        self.device = device
        self.candidates = list(dict.fromkeys(candidates_ or candidates()))
        self._by_params = {self._key(c): c for c in self.candidates}
        self.choices = {p: sorted({getattr(c, p) for c in self.candidates}) for p in PARAMS}

    @staticmethod
    def _key(cfg: HopperBwdConfig) -> tuple:
        return tuple(getattr(cfg, p) for p in PARAMS)

    def prune_reason(self, cfg: HopperBwdConfig | None) -> str | None:
        if cfg is None or self._by_params.get(self._key(cfg)) != cfg:  # the register cap too
            return "not a candidate of the Hopper backward's space"
        if getattr(self.device, "capability", (9, 0)) != (9, 0):
            return "the Hopper backward needs sm_90"
        why = cfg.head_dim_reason(self.head_dim)
        if why is not None:
            return why
        if cfg.consumers == 1 and self.head_dim == 128:
            return "one consumer at head dim 128 crashed ptxas on the H200 (benchmarks/RESULTS.md)"
        need = cfg.shared_bytes(self.head_dim)
        if need > self.device.smem_optin_bytes:
            return f"{need} bytes of shared memory > {self.device.smem_optin_bytes}"
        if cfg.dq_tma:
            from ..kernels.gluon_reduce import reduce_name

            if reduce_name() is None:
                return "this Triton's Gluon has no TMA reduce-add"
        return None

    def fitting(self) -> list[HopperBwdConfig]:
        return [c for c in self.candidates if self.prune_reason(c) is None]

    def params(self, cfg: HopperBwdConfig) -> dict | None:
        """Optuna params for `cfg` (to enqueue it), or None when it is not in the space."""
        key = self._key(cfg)
        return dict(zip(PARAMS, key, strict=True)) if key in self._by_params else None

    def suggest(self, trial) -> HopperBwdConfig | None:
        """The config of the trial's choices; None for a combination that is no config
        (shared dS with one consumer)."""
        key = tuple(trial.suggest_categorical(p, self.choices[p]) for p in PARAMS)
        return self._by_params.get(key)
