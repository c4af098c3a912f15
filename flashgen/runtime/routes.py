"""Per-signature routes for the masked forward: what `primitives._attention_fwd` decided for a
call with an attn_mask (no lengths, dropout or ALiBi; top-left causal or none; not a query
short enough for the decode kernels, which keep their own plans per signature), kept so that
the next call with the same signature goes straight to the launch.

Why: a model that reaches the masked forward every layer (HF encoders with a padded batch,
ModernBERT's local layers with a window beside the padding) can be host-bound: on an H100 HF
ModernBERT's compiled forward held ~0.95 ms of GPU work behind ~0.9-1.65 ms of host work, our
op's Python about twice its isolated cost there (benchmarks/RESULTS.md, sessions 52-53). On a
hit a route skips the branches, checks and decisions of the full path (the mask's checks, the
decode and TMA questions, the window's normalisation, the launcher's plan key); it keeps the
work each call needs: the mask's expanded view, its key range (`padding.key_hull`: a launch
reading this call's mask), the allocations and the launch. Where the plan is the Hopper family's
launched directly, a hit is one flat call (`flashgen.kernels.flat`): in the compiled ModernBERT
the route's own path still took ~124 µs a call (session 54).

What a route stores follows from its key alone: the shapes, strides, dtypes and devices of q,
k, v and the mask, the 16-byte alignment of their addresses, causal, the window, the softcap,
the causal alignment and the environment the decisions read (the forward family's two
variables, `fwd.env_state`). A route is kept only where the launcher kept the plan (not during
a capture, nor while its config is pending), and routes are emptied with the run-time choice's
caches (`dispatch.on_clear`, which drops the plans too), so the flat call, which holds the
plan's launches, never outlives the config they were made for. Without a flat call the plan is
looked up again on every hit by the plan key the route computed (`fwd.plan_key`): a plan the
launcher dropped sends the call down the full path again.
"""

from __future__ import annotations

from ..kernels import fwd
from ..kernels.flat import flat_launch
from ..kernels.launch import hooks_active, keep
from ..kernels.padding import hull_launch, key_hull
from ..kernels.plans import clamp_window
from .dispatch import on_clear, plan_config


class Route:
    """A masked forward's decisions for one call signature (see the module docstring)."""

    __slots__ = ("view", "full", "window", "softcap", "hull", "plan_key", "flat")

    def __init__(self, view, full, window, softcap, hull, plan_key, flat) -> None:
        self.view = view  # the 4-D shape a mask of fewer dims is viewed as, or None
        self.full = full  # the [B, Hq, Sq, Sk] shape it expands to
        self.window = window  # the clamped (left, right) window the launch takes, or None
        self.softcap = softcap  # the checked cap, or None
        self.hull = hull  # whether the mask's key range goes to the kernels as bounds
        self.plan_key = plan_key
        self.flat = flat  # the launches as one flat call (`flat.FlatLaunch`), or None

    def run(self, q, k, v, attn_mask, scale):
        """(out, lse), or None when the launcher no longer holds the plan (take the full path).
        Through the flat call where there is one and no Triton launch hook is attached."""
        flat = self.flat
        if flat is not None and not hooks_active():
            done = flat(q, k, v, attn_mask, scale)
            if done is not None:
                return done
        plan = fwd._plans.get(self.plan_key)
        if plan is None:
            return None
        mask = attn_mask if self.view is None else attn_mask.view(self.view)
        mask = mask.expand(self.full)
        bounds = key_hull(mask, fills_hide=self.window is None) if self.hull else None
        return fwd.launch_planned(plan, q, k, v, scale, self.window, self.softcap, bounds, mask)


def route_key(q, k, v, causal, window, softcap, causal_align, attn_mask) -> tuple:
    """The signature a route is kept under (everything its decisions read; see the module
    docstring)."""
    return (
        q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype,
        q.device, k.device, v.device, attn_mask.shape, attn_mask.stride(), attn_mask.dtype,
        attn_mask.device, not ((q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15),
        not attn_mask.data_ptr() & 15, causal, None if window is None else tuple(window),
        softcap, causal_align, *fwd.env_state(),
    )  # fmt: skip


def remember(key, q, k, v, attn_mask, mask, causal, window, softcap, bounds) -> None:
    """Keep the route of a call the full path just launched through `fwd.forward`: `mask` the
    expanded mask it built, `window` the (left, right) pair, `softcap` the checked cap, `bounds`
    what `_bounds` gave (the mask's key range or None). Only where the launcher kept the plan."""
    window = clamp_window(window, causal, q.shape[2], k.shape[2])
    # (the output and the bounds are new tensors: aligned, as `fwd.forward` found them)
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15)
    plan_key = fwd.plan_key(
        q, k, v, causal, plan_config, aligned, window, softcap, bounds, mask, None, None
    )
    plan = fwd._plans.get(plan_key)
    if plan is None:
        return
    view = None if attn_mask.dim() == 4 else (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    hull = None if bounds is None else hull_launch(mask, fills_hide=window is None)
    flat = flat_launch(plan, hull, window, softcap, mask, attn_mask)
    route = Route(view, tuple(mask.shape), window, softcap, bounds is not None, plan_key, flat)
    keep(_routes, key, route)


# Routes by `route_key`, bounded by `launch.keep`; emptied with the run-time choice's caches.
_routes: dict = {}
on_clear(_routes.clear)


def find(key):
    """The route kept under `key`, or None."""
    return _routes.get(key)
