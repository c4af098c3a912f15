"""What the forward and backward launchers share about launch plans: the per-signature cache
and the config a new plan runs with.

The launchers take a config; they never look one up. `config` is either

- a `TileConfig`: used as given (the tuner, benchmarks, tests);
- a chooser, a callable `(spec, seq_q, seq_k, *, capturing) -> (config, settled)`: how the
  caller's run-time choice (`flashgen.runtime.primitives` passes `flashgen.runtime.dispatch.plan_config`) is
  asked, once per new call signature, for the spec the launcher derives from the tensors. A
  plan is kept only when the chooser says the choice is settled, and never while a CUDA graph
  is being captured (the chooser then answers without asking the tuning database);
- None: the hardware default for the spec (`flashgen.hardware.tiles.default_config`).

Asking a chooser only when a plan is built keeps a repeated call to one dict lookup.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ..core.config import TileConfig
from ..core.spec import KernelSpec, dtype_name, spec_for
from .launch import capturing, value_classes

Chooser = Callable[..., tuple[TileConfig, bool]]
MAX_PLANS = 4096
# log2(e): the kernels' scores are in base-2 units (qk_scale = sm_scale * LOG2E)
LOG2E = 1.4426950408889634


# The largest softcap (scaled-score units) whose kernels drop the running max (the templates'
# FIXED_MAX, both families), as a power of two per input dtype: capped scores lie within
# +-cap, so exp2 of the scores themselves, from 0, lies within 2**+-limit, and the
# probabilities are multiplied into V in the input's dtype. bfloat16 (and float32) share fp32's
# exponent range: 80 leaves room on both sides (the row sums stay below 2**111 for 2**31 keys,
# the output accumulator below 2**128 while keys * max|v| < 2**48; a row whose every score is at
# -cap keeps probabilities of 2**-80, far from 2**-126), and takes Gemma-2's cap of 50 (50 *
# log2(e) = 72.1). float16 holds 2**-14 to 65504 as normal numbers: 14 keeps every probability
# there (caps up to 9.7); a larger cap keeps the running max, whose probabilities never pass 1.
FIXED_MAX_LOG2 = {"bfloat16": 80.0, "float32": 80.0, "float16": 14.0}


def renders_fixed_max(spec: KernelSpec) -> bool:
    """Whether the spec's forward rendering takes FIXED_MAX: softcapped, without ALiBi or an
    additive mask (whose added terms the cap does not bound)."""
    return bool(spec.softcap and not spec.alibi and spec.attn_mask != "add")


def small_cap(softcap, dtype: str) -> bool:
    """Whether a cap (scaled-score units; None: no softcap) is within `FIXED_MAX_LOG2` for
    inputs of `dtype` (a name, `dtype_name`'s), so a forward that renders FIXED_MAX may run
    without the running max (part of the plan keys)."""
    limit = FIXED_MAX_LOG2.get(dtype)
    return softcap is not None and limit is not None and float(softcap) * LOG2E <= limit


def fixed_max(spec: KernelSpec, softcap) -> bool:
    """Whether a softcapped forward call runs without the running max (FIXED_MAX): its
    rendering takes it and its cap is small enough for its dtype. Drops two of the softmax's
    instructions a score (the row maximum and the rescale of the output), which bind a
    softcapped Hopper consumer (benchmarks/RESULTS.md, session 33: 4-5% at head dim 128)."""
    return renders_fixed_max(spec) and small_cap(softcap, spec.dtype)


def plan_config(config, spec: KernelSpec, seq_q: int, seq_k: int, q) -> tuple[TileConfig, bool]:
    """(the config a new plan launches with, whether the plan may be kept), as described in
    the module docstring. `q`: the call's query tensor (is a CUDA graph being captured?)."""
    if isinstance(config, TileConfig):
        return config, True
    if config is None:
        from ..hardware.tiles import default_config

        return default_config(spec), True
    return config(spec, seq_q, seq_k, capturing=capturing(q))


def plan_spec(
    q, direction: str, causal, windowed, capped, bounded, mask_kind, dropped, alibi=False
):
    """The KernelSpec a forward or backward plan compiles: head dim and dtype from the query
    tensor, the rest from the call's flags (cached by `spec_for`: asked once per new plan)."""
    return spec_for(
        q.shape[-1], causal, dtype_name(q.dtype), direction, windowed, capped, bounded, mask_kind,
        dropped, alibi=alibi,
    )  # fmt: skip


def clamp_window(window, causal: bool, seq_q: int, seq_k: int):
    """The (left, right) window a launch passes: right = 0 when causal, and each size at most
    Sq + Sk (past both lengths a size covers everything; int32 sums in the kernels stay exact,
    and the plan key's specialisation classes, `launch.value_classes`, are those launched).
    None stays None."""
    if window is None:
        return None
    reach = seq_q + seq_k
    return (min(window[0], reach), 0 if causal else min(window[1], reach))


def extra_classes(window, bounds, mask, alibi):
    """The plan-key part for a call's run-time extras: `launch.value_classes` of the window
    sizes, bounds, mask, slopes and the slopes' batch stride; None for a plain call (nothing
    to classify: the walk is skipped on the path most calls take)."""
    if window is None and bounds is None and mask is None and alibi is None:
        return None
    return value_classes(window, bounds, mask, alibi, None if alibi is None else alibi.stride(0))


def variant_args(scale: float, window, softcap, bounds, mask, dropout, alibi=None) -> tuple:
    """The run-time arguments of a kernel's variants, in the templates' order (after the
    scale): the window's two sizes, softcap / scale (the kernels cap raw scores), the lengths'
    bounds, the mask and its strides, the ALiBi slopes and their batch stride, dropout's p and
    seed. Each is left out when None (the spec compiled the kernel without it). The same for
    the forward and backward launches."""
    args = () if window is None else (*window,)
    if softcap is not None:
        args = (*args, softcap / scale)
    if bounds is not None:
        args = (*args, bounds)
    if mask is not None:
        args = (*args, mask, *mask.stride())
    if alibi is not None:
        args = (*args, alibi, alibi.stride(0))
    if dropout is not None:
        args = (*args, float(dropout[0]), int(dropout[1]))
    return args


class PlanCache(dict):
    """Launch plans by call signature (a dict: a hit is one `get`). `store` keeps a plan only
    when its config is settled and no CUDA graph is being captured (a plan must hold nothing
    allocated from a graph's pool), and starts over past MAX_PLANS signatures. `clear_all`
    empties every launcher's cache (a new tuning database may choose other configs)."""

    _all: list[weakref.ref[PlanCache]] = []  # weak: a test's throwaway cache is not kept

    def __init__(self) -> None:
        super().__init__()
        PlanCache._all.append(weakref.ref(self))

    def store(self, key: tuple, plan, q) -> None:
        if plan.keep and not capturing(q):
            if len(self) >= MAX_PLANS:
                self.clear()
            self[key] = plan


def clear_all() -> None:
    """Drop every launcher's plans (`flashgen.runtime.primitives` calls it when the run-time choice's cache is
    dropped: `flashgen.runtime.dispatch.on_clear`)."""
    PlanCache._all[:] = [ref for ref in PlanCache._all if ref() is not None]
    for ref in PlanCache._all:
        cache = ref()
        if cache is not None:
            cache.clear()
