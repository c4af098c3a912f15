"""The tuner's plain data: what to tune (`Task`), how hard (`Settings`), what each finished
candidate reports (`Event`) and what a task ends with (`Result`, `Interrupted`).

Its own module so that the search space, the studies and the loop all import it from below
instead of from the loop (which imports them).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from .bench import Outcome


@dataclass(frozen=True)
class Task:
    """One thing to tune: a kernel spec at one shape bucket (query, key)."""

    spec: KernelSpec
    bucket: tuple[int, int]

    def label(self) -> str:
        return f"{self.spec.uri()} {self.bucket[0]}x{self.bucket[1]}"


@dataclass
class Settings:
    """How hard to search. `trials` counts evaluated candidates per task and run (pruned configs
    and answers from the study's memory are free and do not count); `patience` None disables the
    early stop; `lookahead` candidates are asked (and compiled) ahead, never more than the
    patience could still use; up to `max_seeds` known configs are enqueued first, `model_seeds`
    of them the cost model's favourites. `model_seeds` None: enough to fill the first round of
    compiles (max(3, lookahead)); `max_seeds` None: the model's seeds plus 10 others (records,
    and the `model_explorers` with `explore` as their ratio; 0 disables those)."""

    trials: int = 40
    patience: int | None = 15
    seed: int = 0
    min_improvement: float = 0.005
    lookahead: int = 1
    max_seeds: int | None = None
    model_seeds: int | None = None
    since: datetime.datetime | None = None
    explore: float = 1.25
    # False: do not enqueue the defaults table's config (measure what the search finds without
    # it, e.g. in benchmarks/tuner_vs_grid.py, whose cases the table was set from).
    default_seed: bool = True
    # At the end, re-time the best `confirm` configs back to back and keep the winner of that
    # (measured runs only; below 2 disables). The first candidates are timed on a GPU that idled
    # while they compiled and read a few percent fast (benchmarks/RESULTS.md, run 6), enough to
    # crown the wrong one of two near-equal configs.
    confirm: int = 3
    # False: skip the confirmation and the SDPA comparison (this process's search still stores
    # its best). Several workers of one run share each study and its record, so one of them
    # finishes each task while the others go on to the next (`flashgen.tune.workers`).
    finalize: bool = True
    # PyTorch SDPA backends timed against flashgen's best at the end (empty: none). Only an
    # evaluator with `compare` (the measured one) can; a modelled run records no winner.
    impls: tuple[str, ...] = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")

    def n_model_seeds(self) -> int:
        if self.model_seeds is not None:
            return max(0, self.model_seeds)
        return max(3, self.lookahead)

    def n_seeds(self) -> int:
        return self.max_seeds if self.max_seeds is not None else self.n_model_seeds() + 10


@dataclass
class Event:
    """What the loop reports after each finished candidate (progress bars, tests)."""

    task: Task
    config: TileConfig
    outcome: Outcome
    evaluated: int
    best_ms: float
    best_config: TileConfig | None


@dataclass
class Result:
    """The outcome of tuning one task in this process."""

    task: Task
    study_name: str
    measured: bool
    best_config: TileConfig | None = None
    best_ms: float = math.inf
    default_config: TileConfig | None = None
    default_ms: float = math.inf
    evaluated: int = 0
    pruned: int = 0
    failed: int = 0
    stop_reason: str = ""
    tflops: float = 0.0
    written: bool = False
    interrupted: bool = False
    # The confirmation's times (config -> ms), when it ran.
    confirmed: dict[TileConfig, float] = field(default_factory=dict)
    # The implementation comparison (when it ran): the winner, its ratio to the runner-up, the
    # back-to-back times (implementation -> ms, inf = refused or wrong) and why one did not run.
    impl: str = "flashgen"
    impl_ratio: float | None = None
    impl_times: dict[str, float] = field(default_factory=dict)
    impl_notes: dict[str, str] = field(default_factory=dict)
    study: object = field(default=None, repr=False)

    @property
    def gain(self) -> float:
        """Default config time / best time (1.0 = the default was already best)."""
        if math.isfinite(self.default_ms) and self.best_ms > 0 and math.isfinite(self.best_ms):
            return self.default_ms / self.best_ms
        return math.nan


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a task: every finished trial is stored; `result` is the partial result."""

    def __init__(self, result: Result) -> None:
        super().__init__("tuning interrupted")
        self.result = result
