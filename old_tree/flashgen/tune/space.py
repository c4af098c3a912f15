"""The search's space for one spec (categorical choices, the fit test) and its first trials.

`Space` turns a `TileConfig` into Optuna parameters and back, and says why a config is pruned
before anything is compiled. `seed_configs` lists what is already known, best guesses first, for
the search to enqueue: the defaults table, records of other environments and neighbouring
buckets, and the cost model's favourites (`model_ranked`, `model_explorers`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from .bench import timing_shape
from .tasks import Task

PARAMS = ("block_m", "block_n", "num_warps", "num_stages")


class Space:
    """The categorical choices for one spec and the fit test for the target device."""

    def __init__(self, spec: KernelSpec, device, candidates: Sequence[TileConfig] | None = None):
        from ..hardware import tiles as space

        self.spec = spec
        self.device = device
        if candidates is None:
            candidates = space.candidates(spec)
        self.candidates = list(dict.fromkeys(candidates))
        self._candidate_set = set(self.candidates)
        self.choices = {p: sorted({getattr(c, p) for c in self.candidates}) for p in PARAMS}
        self._fits: dict[TileConfig, bool] = {}

    def fits(self, cfg: TileConfig) -> bool:
        """In the candidates and within the device's shared memory. A backward config must fit
        both backward kinds: the tuner times the kind that runs by default
        (`flashgen.kernels.bwd_kind.DEFAULT_KIND`, see `flashgen.tune.bench.launcher`) and the
        deterministic mode runs the split kind with the same record."""
        from ..hardware.sram import fits

        if cfg not in self._fits:
            ok = cfg in self._candidate_set and bool(fits(self.spec, cfg, self.device))
            if ok and self.spec.direction == "bwd":
                ok = bool(fits(self.spec, cfg, self.device, tuned_backward_kind(self.spec)))
            self._fits[cfg] = ok
        return self._fits[cfg]

    def prune_reason(self, cfg: TileConfig) -> str | None:
        if cfg not in self._candidate_set:
            return "not a candidate of flashgen.hardware.tiles"
        if not self.fits(cfg):
            return f"does not fit {self.device.name} (shared memory / registers)"
        return None

    def fitting(self) -> list[TileConfig]:
        return [c for c in self.candidates if self.fits(c)]

    def params(self, cfg: TileConfig) -> dict[str, int] | None:
        """Optuna params for `cfg`, or None when a value is outside the choices."""
        values = cfg.as_dict()
        if all(values[p] in self.choices[p] for p in PARAMS):
            return {p: values[p] for p in PARAMS}
        return None

    def suggest(self, trial) -> TileConfig:
        return TileConfig(**{p: trial.suggest_categorical(p, self.choices[p]) for p in PARAMS})


def tuned_backward_kind(spec: KernelSpec) -> str:
    """The backward kind the tuner times for a bwd spec: the one a call runs when determinism
    is not asked for (`flashgen.kernels.bwd_kind.resolve_kind` with deterministic=False)."""
    from ..kernels.bwd_kind import resolve_kind

    return resolve_kind(False, None, spec)


def model_ranked(task: Task, device, configs: Sequence[TileConfig], k: int) -> list[TileConfig]:
    """The `k` configs the cost model expects fastest for `task` on `device`."""
    from ..hardware.costmodel import estimate_ms

    if k <= 0:
        return []
    shape = timing_shape(task.spec, task.bucket)
    return sorted(configs, key=lambda c: (estimate_ms(task.spec, c, shape, device), c))[:k]


def model_explorers(
    task: Task, device, configs: Sequence[TileConfig], taken: Sequence[TileConfig], ratio: float
) -> list[TileConfig]:
    """A hedge against the cost model's blind spots: for every value of every parameter (e.g.
    256-row blocks, 8 warps), the config the model likes best among those with that value, when
    it is not in `taken` and the model puts it within `ratio` of its favourite. Values the model
    calls clearly slow (tiny tiles, 2 warps on Hopper) are left to the sampler."""
    from ..hardware.costmodel import estimate_ms

    if not configs or not ratio:
        return []
    shape = timing_shape(task.spec, task.bucket)
    est = {c: estimate_ms(task.spec, c, shape, device) for c in configs}
    ranked = sorted(configs, key=lambda c: (est[c], c))
    limit = est[ranked[0]] * ratio
    out: list[TileConfig] = []
    for p in PARAMS:
        for value in sorted({getattr(c, p) for c in ranked}):
            cfg = next(c for c in ranked if getattr(c, p) == value)
            if est[cfg] <= limit and cfg not in taken and cfg not in out:
                out.append(cfg)
    return out


def seed_configs(
    task: Task,
    device,
    env,
    records: Sequence,
    limit: int,
    modelled: Sequence[TileConfig] = (),
    *,
    default: bool = True,
) -> list[tuple[TileConfig, str]]:
    """What is already known, best guesses first: the defaults table's config (unless `default`
    is False); then the best configs found for this very bucket in other environments (another
    GPU, other software versions, or the cost model: same GPU first, measured before modelled);
    then this GPU's best configs for the same kernel in the other 16-bit dtype
    (`KernelSpec.sibling`, nearest buckets first, at most 2); then `modelled` (the cost model's
    favourites, `model_ranked`); then this GPU's best configs at neighbouring buckets, nearest
    first. `records` may hold any specs: only this task's and its sibling's are used."""
    from ..hardware import tiles as space
    from ..runtime.lookup import rank

    seeds: list[tuple[TileConfig, str]] = []
    if default:
        seeds.append((space.default_config(task.spec, device), "default"))
    mine = [r for r in records if r.spec == task.spec]
    elsewhere = sorted(
        (r for r in mine if r.bucket == task.bucket and r.env.key() != env.key()),
        key=lambda r: (not r.env.same_gpu(env), not r.measured, r.time_ms),
    )
    seeds += [(r.config, f"{r.env.gpu_name} ({'measured' if r.measured else 'modelled'})")
              for r in elsewhere]  # fmt: skip
    sibling = task.spec.sibling()
    siblings = sorted(
        (r for r in records if r.spec == sibling and r.env.same_gpu(env)),
        key=lambda r: rank(task.bucket, r),
    )
    seeds += [(r.config, f"{r.spec.dtype} {r.bucket[0]}x{r.bucket[1]}") for r in siblings[:2]]
    seeds += [(cfg, "cost model") for cfg in modelled]
    neighbours = sorted(
        (r for r in mine if r.env.same_gpu(env) and r.bucket != task.bucket),
        key=lambda r: rank(task.bucket, r),
    )
    seeds += [(r.config, f"neighbour {r.bucket[0]}x{r.bucket[1]}") for r in neighbours]
    unique: dict[TileConfig, str] = {}
    for cfg, source in seeds:
        unique.setdefault(cfg, source)
    return list(unique.items())[: max(limit, 1)]
