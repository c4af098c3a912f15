"""Host launcher for the generated forward kernel.

`forward` runs on every attention call, so it does the minimum. Everything that depends only on
the call's signature (shapes, strides, dtype, device, causal, config, pointer alignment, the
FLASHGEN_FWD_TMA and FLASHGEN_FWD_FAMILY settings) is decided once into a `_Plan`: the spec,
the family, the config (`flashgen.kernels.plans`), the kernel (TMA or pointers), the grid, the integer arguments,
descriptor templates, and after the first launch the compiled kernel itself
(`flashgen.kernels.launch`, which skips Triton's per-call binding). A later call with that signature allocates out/lse, looks the plan up in a
dict and launches. Input validation is the caller's job (`flashgen.kernels.validate.check_inputs`,
which `flashgen.ops.attention` runs first); this function assumes inputs that passed it.

Two kernels come from one template: `attn_fwd` (pointer loads, runs anywhere) and
`attn_fwd_tma` (Q/K/V/O through TMA tensor descriptors, Hopper and newer). On the H200 the
descriptor version measured 5-8% faster (benchmarks/RESULTS.md), and TMA's zero fill replaces the
ragged-edge masks. It needs 16-byte aligned bases and strides, so anything else (and any
pre-Hopper GPU) takes the pointer kernel. FLASHGEN_FWD_TMA=0 forces pointers, =1 forces
descriptors (also in the CPU interpreter, which is how the tests cover that path).

On an sm_90 GPU a second family, the warp-specialised Gluon kernel of `flashgen.kernels.hopper`, takes
the specs where it measured faster (`hopper.choose` says which, and logs why not); an explicit
`config` always means the portable family. Its plan is a `Launch` as well (`hopper.plan`):
through Gluon's JIT the first time, then directly. Through the JIT, building its four
descriptors alone cost ~40 µs each on the host (benchmarks/RESULTS.md, "why the 1k shapes read
unsteadily"), more than a 1k causal kernel's GPU time.

CUDA graphs: nothing here synchronises, and the only allocation-dependent input (whether all
four pointers are 16-byte aligned) is part of the plan key, so a captured call replays exactly
what it recorded. A plan first needed while a CUDA graph is being captured asks its chooser
with `capturing=True` (no tuning database then) and is not kept, so the next eager call
resolves it properly.
"""

from __future__ import annotations

import functools
import math

import torch

from ..core.config import TileConfig
from ..core.spec import cdiv, dtype_name
from ..hardware.tiles import default_config
from . import block_mask, hopper, mask_ranges, tma
from .codegen import load
from .lasting import lasting
from .launch import Launch, capturing, direct_device
from .layout import new_out
from .plans import (
    LOG2E,
    Chooser,
    PlanCache,
    clamp_window,
    extra_classes,
    plan_config,
    plan_spec,
    renders_fixed_max,
    small_cap,
    variant_args,
)

_F32 = torch.float32
_ENV = "FLASHGEN_FWD_TMA"
_env = tma.env_reader(_ENV)
_family = tma.env_reader(
    hopper.FAMILY_ENV
)  # which forward family (`flashgen.kernels.hopper.choose`)


def env_state() -> tuple:
    """The two environment variables the forward's family choice reads (FLASHGEN_FWD_TMA and
    `hopper.FAMILY_ENV`), raw: for callers that keep an answer of that choice per signature."""
    return _env(), _family()


_plans = PlanCache()  # `flashgen.runtime.primitives` clears it with the run-time choice's cache


def use_tma(q, k, v, out=None) -> bool:
    """Whether `forward` takes the descriptor kernel: q, k, v and the output it writes must all
    be TMA-compatible (`out` None: the output `forward` would allocate, `layout.new_out`)."""
    if out is None:
        out = new_out(q)
    return tma.use_tma(_ENV, (q, k, v, out))


class _Plan:
    """One call signature's launch: the kernel launch and the arguments fixed by the signature.

    A plan holds no device memory (a plan made while a CUDA graph is recorded must not keep
    anything allocated from the graph's pool alive)."""

    __slots__ = (
        "run", "tail", "strides", "scale", "keep", "hopper", "lse_shape", "lse_numel", "device",
        "tiles", "blocks", "ranges", "split", "tma_mask",
    )  # fmt: skip

    def __init__(
        self, q, k, v, out, causal: bool, config, aligned: bool, forced, windowed=False,
        capped=False, bounded=False, mask_kind="", dropped=False, per_key=False, alibi=False,
        shared=0, sparse=False, narrow=False, capped_small=False, mask=None,
    ):  # fmt: skip
        batch, hq, sq, dim = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        spec = plan_spec(q, "fwd", causal, windowed, capped, bounded, mask_kind, dropped, alibi)
        # FIXED_MAX (no running max) where the rendering takes it and the cap is small enough
        # (`plans.small_cap`, part of the plan's key): both families
        fixed = capped_small and renders_fixed_max(spec)
        self.keep = True
        self.scale = 1.0 / math.sqrt(dim)
        self.hopper = None
        # lse is allocated with torch.empty from these: `q.new_empty(shape, dtype=...)` measured
        # several times slower on the host (its argument parsing), on every call
        self.lse_shape = (batch, hq, sq)
        self.lse_numel = batch * hq * sq
        self.device = q.device
        # a boolean mask's portable kernels take the block-sparse lists' arguments last:
        # None (no such arguments), False (placeholders, not read) or True (built per call)
        self.tiles = None
        # the Hopper kernel's mask-range arguments, last: None (a spec without a mask tensor),
        # False (placeholders, not read) or True (the mask's key ranges, built per call)
        self.ranges = None
        # the Hopper kernel's split last round (`hopper.TailSplit`), or None
        self.split = None
        # the Hopper kernel's MASK_TMA (its mask tiles by TMA, the buffers a consumer; 0: the
        # gathered loads; desc_mask last), or None for a rendering without it
        self.tma_mask = None
        if not isinstance(config, TileConfig) and hopper.choose(spec, q, k, v, sq, per_key):
            # The Gluon family, with its own config for this length; launched directly too.
            # MASK_PER_KEY (a mask constant along query rows) is a constexpr there as well.
            self.hopper = spec
            if mask_kind:
                self.ranges = (mask_kind == "bool" and not per_key and not bounded
                               and mask_ranges.enabled())  # fmt: skip
            cfg = hopper.config_for(spec, sq, narrow)
            device = direct_device(q, aligned)
            ranges = bool(self.ranges)
            self.split = hopper.tail_plan(spec, cfg, q, k, device)
            desc = None
            if mask_kind:
                self.tma_mask, desc = hopper.mask_tma_plan(spec, cfg, mask)
            self.run = hopper.plan(spec, cfg, q, k, v, out, device, per_key=per_key,
                                   ranges=ranges, split=self.split, fixed=fixed,
                                   mask_tma=(self.tma_mask, desc))  # fmt: skip
            self.tail = hopper.sizes(q, k)
            return
        given = config
        config, self.keep = plan_config(config, spec, sq, sk, q)
        if per_key and not isinstance(given, TileConfig) and config == default_config(spec):
            # the defaults' mask-tensor row was measured on [Sq, Sk] tiles; a key-padding
            # mask (one vector of keys a tile) runs the general row
            config = default_config(spec, per_key=True)
        module = load(spec)
        bm, bn = config.block_m, config.block_n
        self.blocks = (bm, bn)
        if mask_kind == "bool":
            self.tiles = sparse
        self.tail = (hq, hq // hkv, sq, sk)
        if not bounded and tma.use_tma(_ENV, (q, k, v, out), forced=forced):
            kernel = module.attn_fwd_tma
            pairs = ((q, bm), (k, bn), (v, bn), (out, bm))
            descs = tuple(
                (i, tma.descriptor_template(t, rows, spec.block_d))
                for i, (t, rows) in enumerate(pairs)
            )
            self.strides = None
        else:
            kernel = module.attn_fwd
            descs = ()
            self.strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3])
        self.run = Launch(
            kernel,
            (cdiv(sq, bm) * batch * hq,),
            # MASK_PER_KEY: a mask constant along query rows is read as one vector per tile;
            # MASK_SHARED: the programs sharing a mask tensor launched side by side; FIXED_MAX:
            # a softcapped call without the running max
            {
                "BLOCK_M": bm,
                "BLOCK_N": bn,
                **({"MASK_PER_KEY": per_key, "MASK_SHARED": shared} if mask_kind else {}),
                **({"BLOCK_SPARSE": sparse} if mask_kind == "bool" else {}),
                **({"FIXED_MAX": fixed} if renders_fixed_max(spec) else {}),
            },
            {"num_warps": config.num_warps, "num_stages": config.num_stages},
            direct_device(q, aligned),
            descs,
        )

    def launch(
        self, q, k, v, out, lse, scale, window=None, softcap=None, bounds=None, mask=None,
        dropout=None, alibi=None,
    ) -> None:  # fmt: skip
        scale = float(self.scale if scale is None else scale)
        qk_scale = scale * LOG2E
        # (the key fixed which extras a call has, so the spec needs no check per call)
        win = variant_args(scale, window, softcap, bounds, mask, dropout, alibi)
        if self.ranges is not None:  # the Hopper kernel's mask ranges, or placeholders
            win = (*win, *hopper.range_args(mask, self.ranges))
        if self.tma_mask is not None:  # its desc_mask (a descriptor or a placeholder)
            win = (*win, hopper.mask_tma_arg(mask, self.tma_mask))
        if self.tiles is not None:  # the block-sparse lists, or placeholders not read
            if self.tiles:
                win = (*win, *block_mask.tile_lists(mask, *self.blocks))
            else:
                win = (*win, mask, mask, 0, 0)
        self.start(q, k, v, out, lse, qk_scale, win)

    def start(self, q, k, v, out, lse, qk_scale: float, win: tuple = ()) -> None:
        """Launch with the kernel's argument order: the extras' arguments `win` last."""
        if self.hopper is not None:  # the Gluon kernel: the work-item counter before the sizes
            counter = hopper.sched_counter(self.device)
            # (lse stands in for the split parts' buffers: unread unless the launch splits)
            args = (q, k, v, out, lse, counter, lse, lse, *self.tail, qk_scale, *win)
            if self.split is None:
                self.run(*args)
            else:
                self.split.launch(self.run, args, out, lse)
        elif self.strides is None:  # q, k, v, out travel as TMA descriptors
            self.run(q, k, v, out, lse, *self.tail, qk_scale, *win)
        else:
            self.run(q, k, v, out, lse, *self.strides, *self.tail, qk_scale, *win)


def forward(
    q, k, v, *, causal: bool, scale: float | None, config: TileConfig | Chooser | None = None,
    window=None, softcap=None, bounds=None, mask=None, dropout=None, keep_lse: bool = True,
    alibi=None, rows_whole: bool = False,
):  # fmt: skip
    """Attention forward: returns (out, lse).

    q [B, Hq, Sq, D], k/v [B, Hkv, Sk, D] (Hq % Hkv == 0, last dim contiguous, any other
    strides). out is a new dense tensor in q's dtype whose strides follow q's dimension order
    (`flashgen.kernels.layout.new_out`: SDPA's rule, so that a model's transpose back of a
    [B, Sq, Hq, D] view is a view); lse is float32 [B, Hq, Sq], the
    natural log of the softmax denominator over the keys each row sees (what the backward needs).
    `config`: a TileConfig (tuning, benchmarks), the caller's chooser (`flashgen.runtime.primitives` passes the
    run-time choice) or None (the hardware default); see `flashgen.kernels.plans`.
    `window` (left, right), both >= 0: query i sees only keys i - left <= j <= i + right (and
    j <= i when causal; `flashgen.kernels.validate.normalize_window` makes the pair); the
    windowed kernel takes the sizes as run-time arguments. `softcap` (a positive float): the
    scaled scores s become softcap * tanh(s / softcap) before the softmax (Gemma-2), in a kernel
    with the cap as a run-time argument. `bounds` (int32 [B, 4], contiguous, on q's device;
    `flashgen.kernels.padding.bounds`): batch entry b's valid query rows are
    [bounds[b, 0], + bounds[b, 1]) and its valid keys [bounds[b, 2], + bounds[b, 3]); causal
    mask and window count positions from those starts; rows outside get zeros and lse = +inf.
    `mask`: a boolean (True: visible) or floating (added to the scaled scores) tensor of shape
    [B, Hq, Sq, Sk], any strides (an expanded view: 0 along broadcast dims;
    `flashgen.kernels.validate.expand_mask`); with `bounds` only as
    `flashgen.runtime.primitives` passes them, a key-padding mask's key range
    (`padding.key_hull`, starts 0: the Hopper kernel reads the mask at q_start + i,
    k_start + j, the portable ones at i, j, the same there). Query-row stride 0 (a key-padding
    mask): both families read one vector of keys a tile (MASK_PER_KEY). A mask shared by heads
    or batch entries has the programs reading the same tiles launched side by side
    (`mask_shared`). A boolean mask varying along query rows, without causal, window or bounds,
    walks lists of the key tiles each query block sees whole or in part unless
    FLASHGEN_BLOCK_SPARSE=0 (`flashgen.kernels.block_mask`). A floating mask hides
    a key only with -inf: a row whose visible keys all carry a huge finite bias (HF's finfo.min)
    gets their values' mean, as PyTorch's softmax gives, and lse = +inf (no gradient).
    `dropout`: None or (p, seed), 0 < p < 1 and an int seed (`flashgen.kernels.dropout`): the
    probabilities are dropped with probability p by the mask `dropout.keep_mask` gives for
    that seed, the kept ones scaled by 1 / (1 - p); lse is that of the undropped ones.
    `alibi`: None or the ALiBi slopes, float32 [B, Hq] with the last stride 1 (an expanded
    view of [Hq]: batch stride 0; `flashgen.kernels.alibi.check_slopes`): slope * (j - i)
    is added to the scaled score of query i and key j (after a softcap).
    `keep_lse` False (a forward no backward will follow): returns (out, None); the kernel's
    logsumexp goes to a scratch buffer where it fits (`_scratch_lse`), saving an allocation.
    `rows_whole`: `bounds` leave every query row valid (`padding.key_hull`'s): the kernels then
    store every row of out and lse, so neither is filled first (at B4 H16 4k d128 bf16 the
    zero fill of out was ~22 µs of GPU time).
    """
    window = clamp_window(window, causal, q.shape[2], k.shape[2])
    fill = bounds is not None and not rows_whole  # the kernel stores only the valid rows
    out = new_out(q, zeros=fill)
    if out.numel() == 0:  # nothing to launch: no config lookup, no pending record either
        return out, q.new_empty(q.shape[:3], dtype=torch.float32)
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr() | out.data_ptr()) & 15)
    key = plan_key(q, k, v, causal, config, aligned, window, softcap, bounds, mask, dropout, alibi)
    plan = _plans.get(key)
    if plan is None:
        narrow, capped_small = _tile_flags(q, k, window, softcap)
        forced = _env()
        per_key = mask is not None and mask.stride(2) == 0
        sparse = block_mask.eligible(mask, causal, window, bounds, per_key, sq=q.shape[2],
                                     sk=k.shape[2])  # fmt: skip
        plan = _Plan(
            q, k, v, out, causal, config, aligned, forced, window is not None,
            softcap is not None, bounds is not None, mask_kind(mask), dropout is not None,
            per_key, alibi is not None, mask_shared(mask), sparse, narrow, capped_small, mask,
        )  # fmt: skip
        _plans.store(key, plan, q)
    if fill:
        lse = q.new_full(q.shape[:3], float("inf"), dtype=torch.float32)
    else:
        lse = None if keep_lse else _scratch_lse(plan, q)
        if lse is None:
            lse = torch.empty(plan.lse_shape, dtype=_F32, device=plan.device)
    plan.launch(q, k, v, out, lse, scale, window, softcap, bounds, mask, dropout, alibi)
    return out, (lse if keep_lse else None)


def plan_key(q, k, v, causal, config, aligned, window, softcap, bounds, mask, dropout, alibi):
    """`forward`'s plan key (its `window` already clamped, `aligned`: q, k, v and the output all
    16-byte aligned): everything a plan fixes. Also the key of a masked call's route
    (`flashgen.runtime.primitives`), which launches the plan through `launch_planned`."""
    narrow, capped_small = _tile_flags(q, k, window, softcap)
    return (q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, causal,
            config, aligned, _env(), _family(), window is not None, narrow, softcap is not None,
            capped_small, bounds is not None, mask_kind(mask),
            None if mask is None else (mask.stride(), mask.dtype, mask.data_ptr() % 16 == 0),
            dropout is not None,
            extra_classes(window, bounds, mask, alibi))  # fmt: skip


def _tile_flags(q, k, window, softcap) -> tuple[bool, bool]:
    """(narrow, capped_small): a narrow window's Hopper plan takes other tiles
    (`hopper.NARROW_CONFIGS`), and a cap small enough for the dtype runs without the running
    max (`plans.small_cap`): each its own plan."""
    narrow = window is not None and hopper.narrow_window(window, k.shape[2])
    capped_small = softcap is not None and small_cap(softcap, dtype_name(q.dtype))
    return narrow, capped_small


def launch_planned(plan, q, k, v, scale, window, softcap, bounds, mask):
    """(out, lse) of a masked call whose plan its caller looked up by `plan_key` (a route of
    `flashgen.runtime.primitives`): `forward`'s allocations and launch without its key
    building, for calls whose bounds leave every query row valid (none, or a mask's key
    range) and without dropout or ALiBi; out is non-empty (the route is made only then)."""
    out = new_out(q)
    lse = torch.empty(plan.lse_shape, dtype=_F32, device=plan.device)
    plan.launch(q, k, v, out, lse, scale, window, softcap, bounds, mask)
    return out, lse


def forward_plain(q, k, v, causal: bool, scale: float | None, config, keep_lse: bool):
    """`forward` of a call without extras (no window, softcap, bounds, mask, dropout or ALiBi),
    for the eager path that every short call takes (`flashgen.runtime.primitives.plain_forward`):
    the same plans and launches, with a key of what such a call can vary in and none of the
    extras' branches. On the H200 the launcher's own host work around the launch was ~7 of a
    17 µs call (benchmarks/RESULTS.md, session 15, host steps). The output is not part of the
    alignment test: a fresh allocation starts 512-byte aligned (PyTorch's allocators), so it is
    aligned whenever q, k and v are."""
    out = new_out(q)
    if out.numel() == 0:  # nothing to launch: no config lookup, no pending record either
        return out, q.new_empty(q.shape[:3], dtype=torch.float32)
    aligned = not ((q.data_ptr() | k.data_ptr() | v.data_ptr()) & 15)
    forced = _env()
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), q.dtype, q.device, causal, config,
           aligned, forced, _family())  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        plan = _Plan(q, k, v, out, causal, config, aligned, forced)
        _plans.store(key, plan, q)
    lse = None if keep_lse else _scratch_lse(plan, q)
    if lse is None:
        lse = torch.empty(plan.lse_shape, dtype=_F32, device=plan.device)
    plan.start(q, k, v, out, lse, float(plan.scale if scale is None else scale) * LOG2E)
    return out, (lse if keep_lse else None)


SCRATCH_FLOATS = 1 << 18
_scratch: dict = {}  # device -> float32 [SCRATCH_FLOATS], kept for the life of the process


def _scratch_lse(plan: _Plan, q):
    """Where a forward whose logsumexp nobody reads writes it, or None (allocate as usual).

    On the H200 the launcher's two allocations were 10.4 µs of a 23.6 µs forward call
    (benchmarks/RESULTS.md, host time, session 7), so a no-grad call writes lse into one
    buffer per device instead. Its values are never read, so calls on several streams may
    overwrite each other's. It is never freed, so no kernel still writing into it (another
    stream, a replayed CUDA graph that captured its address) can hit memory handed out again;
    it is 1 MiB, so only calls with at most SCRATCH_FLOATS rows use it (larger ones are not
    launch-bound), and it is not created during a capture (it would come from the graph's
    pool) nor inside a CUDA-graph pool otherwise (`lasting`: Inductor's CUDA-graph trees route
    the allocations of their warm-up calls there). Both families' kernels take lse as a
    pointer to contiguous [B, H, Sq] floats."""
    if plan.lse_numel > SCRATCH_FLOATS:
        return None
    buf = _scratch.get(plan.device)
    if buf is None:
        if capturing(q):
            return None
        make = functools.partial(torch.empty, SCRATCH_FLOATS, dtype=_F32, device=plan.device)
        buf = _scratch[plan.device] = lasting(make, plan.device) if q.is_cuda else make()
    return buf


def mask_shared(mask) -> int:
    """The portable kernels' MASK_SHARED for `mask` (an expanded [B, H, Sq, Sk] view): 1 when
    its heads share one tensor (head stride 0, more than one head), 2 when its batch entries
    do, 3 both, 0 otherwise and for a key-padding mask (query-row stride 0: one vector a tile,
    little traffic to share). The kernels then launch the programs that read the same tiles
    side by side (templates/attn_fwd.py.jinja). On the H200 that measured neutral (a [1, H, N,
    N] bias forward 1.316 -> 1.287 ms, session 13 B1): those forwards are latency-bound, not
    memory-bound; the order costs nothing on the launch path (a constexpr chosen per plan)."""
    if mask is None or mask.stride(2) == 0:
        return 0
    batch, heads = mask.shape[:2]
    return (1 if heads > 1 and mask.stride(1) == 0 else 0) | (
        2 if batch > 1 and mask.stride(0) == 0 else 0
    )


def mask_kind(mask) -> str:
    """The KernelSpec.attn_mask kind of a mask tensor: "" (none), "bool" or "add"."""
    if mask is None:
        return ""
    return "bool" if mask.dtype == torch.bool else "add"
