"""A repeated masked forward's launches as one flat call: the mask's key range, then attention.

Why: inside a compiled HF ModernBERT forward (B4 T2048, bf16, an H100) a masked call that its
route already knew (`flashgen.runtime.routes`) still took ~124 µs of host time, against ~60
alone; torch.profiler put it at 126 µs against 68 for the cuDNN call Inductor's graph makes
there, the rest of the graph alike, and the model's forward is host-bound on a slow host
(benchmarks/RESULTS.md, sessions 52-54). Of those 124 µs: ~43 in the key range
(`padding.key_hull`: its checks, a view of the mask as bytes, the launch), ~60 in the planned
launch (the arguments rebuilt from the call's extras, the allocations, the launch) and ~20 in
the rest (the plan's lookup, the mask's view and expand). Everything but the allocations and
the two launches is fixed by the call's signature, so `FlatLaunch` keeps it: one stream lookup,
the key range's launch on the mask as the caller passed it (a view has its address; only the
address travels), the output, logsumexp and work-item counter, and the attention kernel's
launch with the expanded mask's strides kept from the plan's first call. On an H100 the op
alone went from 56-84 to 37-46 µs a call, below SDPA's masked call in the same process
(session 54).

Only what `flat_launch` accepts takes it: the Hopper family's plan (no tail split, mask ranges
or mask descriptor) whose launch, and the key range's if there is one, go through
`launch.RawLaunch` (Triton 3.6's C launcher). Anything else, and any call while a Triton launch
hook is attached, keeps the route's own path (`flashgen.runtime.routes.Route.run`).
"""

from __future__ import annotations

import torch

from .hopper import stream_counter
from .launch import NO_CONTEXT, RawLaunch, bind_context, raw_stream
from .layout import new_out
from .plans import LOG2E

_F32 = torch.float32
_I32 = torch.int32


class FlatLaunch:
    """The launches of one masked call signature (module docstring). Called with the call's
    (q, k, v, attn_mask, scale) -> (out, lse), or None where the launch met a thread without a
    CUDA context (bound now; the caller takes its own path once)."""

    __slots__ = (
        "main", "hull", "hull_tail", "hull_shape", "device", "index", "lse_shape", "sizes",
        "window", "cap", "mask_strides", "tma_placeholder",
    )  # fmt: skip

    def __init__(self, main, hull, hull_tail, plan, window, softcap, mask) -> None:
        self.main = main  # the attention kernel's RawLaunch
        self.hull = hull  # the key range kernel's RawLaunch, or None (no key range)
        self.hull_tail = hull_tail
        self.hull_shape = (mask.shape[0], 4)
        self.device = plan.device
        self.index = plan.device.index
        self.lse_shape = plan.lse_shape
        self.sizes = plan.tail
        self.window = () if window is None else tuple(window)
        self.cap = softcap
        self.mask_strides = mask.stride()
        self.tma_placeholder = plan.tma_mask == 0  # desc_mask's argument: the mask, not read

    def __call__(self, q, k, v, attn_mask, scale):
        # (raw_stream is None only in CPU-only builds, which make no RawLaunch, so no FlatLaunch)
        stream = raw_stream(self.index)  # type: ignore[misc]
        win = self.window if self.cap is None else (*self.window, self.cap / scale)
        try:
            if self.hull is not None:
                bounds = torch.empty(self.hull_shape, dtype=_I32, device=self.device)
                self.hull(stream, (attn_mask, bounds, *self.hull_tail))
                win = (*win, bounds)
            out = new_out(q)
            lse = torch.empty(self.lse_shape, dtype=_F32, device=self.device)
            counter = stream_counter(self.device, stream)
            # `fwd._Plan.start`'s order for the Hopper family: the extras (`plans.variant_args`),
            # the mask-range placeholders (`hopper.range_args`), desc_mask's placeholder
            args = (q, k, v, out, lse, counter, lse, lse, *self.sizes, scale * LOG2E, *win,
                    attn_mask, *self.mask_strides, attn_mask, 0, 0)  # fmt: skip
            self.main(stream, (*args, attn_mask) if self.tma_placeholder else args)
        except RuntimeError as exc:
            if NO_CONTEXT not in str(exc):
                raise
            bind_context()
            return None
        return out, lse


def flat_launch(plan, hull, window, softcap, mask, attn_mask):
    """A `FlatLaunch` for a masked call that `fwd.forward` just launched with `plan`, or None
    where it does not apply (module docstring; `flat_reason` says why). `hull`:
    `padding.hull_launch(mask)` where the call's bounds were the mask's key range, else None;
    `window` the clamped (left, right) pair or None; `softcap` the checked cap or None; `mask`
    the expanded [B, Hq, Sq, Sk] view the call launched with, `attn_mask` the tensor the caller
    passed (the view must start at its address: only addresses reach the kernels)."""
    if flat_reason(plan, hull, mask, attn_mask) is not None:
        return None
    hull_raw, hull_tail = (None, ()) if hull is None else (hull[0].fast, hull[1])
    return FlatLaunch(plan.run.fast, hull_raw, hull_tail, plan, window, softcap, mask)


def flat_reason(plan, hull, mask, attn_mask) -> str | None:
    """Why `flat_launch` gives None for these arguments, or None where it gives a FlatLaunch."""
    if mask.data_ptr() != attn_mask.data_ptr():
        return "the expanded mask does not start at the caller's mask"
    if plan.device.index is None:
        return "no device index"
    if plan.hopper is None:
        return "not the Hopper family"
    if plan.split is not None or plan.ranges is not False or plan.tma_mask:
        return "a tail split, mask ranges or a mask descriptor"
    main = getattr(plan.run, "fast", None)
    if not isinstance(main, RawLaunch):
        return f"the attention launch is not a RawLaunch ({type(main).__name__})"
    hull_fast = None if hull is None else getattr(hull[0], "fast", None)
    if hull is not None and not isinstance(hull_fast, RawLaunch):
        return f"the key range's launch is not a RawLaunch ({type(hull_fast).__name__})"
    return None
