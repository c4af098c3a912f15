"""Host side of the FlashAttention backward: launch the generated kernels with a config.

A config names the dK/dV kernel's tiles. The dQ kernel runs `dq_config` when given, else, for
a config chosen at run time (records, defaults: `config` None or a chooser), its own measured
config (`flashgen.hardware.dq_tiles`, via `dq_config_for`; the tuner times the same), else (an
explicit TileConfig, as tests and benchmarks pass) the same config as the dK/dV kernel.

Three launches: `attn_bwd_preprocess` (delta = rowsum(dO * O)), `attn_bwd_dkdv` (one program per
key block and kv head, summing over the query heads of its GQA group, so dK/dV are written once:
deterministic, no atomics) and `attn_bwd_dq` (one program per query block and head). Where the
dQ and dK/dV kernels run one after the other on one stream (`flashgen.kernels.streams` does not
overlap them: short calls, graph capture) a call without extras launches two: the dQ kernel
first, computing delta of its own rows from O and dO as it loads dO (`attn_bwd_dq_delta`), then
dK/dV reading it; and a short call without extras (keys that fit one block, a few query
blocks: `SHORT_MAX_K`, `SHORT_MAX_STEPS`) launches one, `attn_bwd_short`, whose program per kv head
holds every key, so each query block's dQ is complete in it (no atomics: still deterministic).
With dropout the preprocess is `attn_bwd_preprocess_drop`, which also stores
each query row's dropout key for the dK/dV kernel (there every thread holding a row's column
of the transposed tile would hash it again). A launch costs host time (10-15 µs each on the
H200's host in benchmarks/host_steps.py), and a short call is bound by it. The N x N
probability matrix is never stored; both kernels recompute it from the forward's logsumexp.
Gradients nobody asked for are not computed: `needs=(dq, dk, dv)` skips the dQ kernel, or the
dK/dV kernel when neither dK nor dV is wanted.

The dK/dV and dQ kernels come in two builds from one template: pointer loads (run anywhere) and
`*_tma`, which moves Q/K/V/dO through TMA tensor descriptors (Hopper and newer). Compiled ahead
of time for sm90 (triton 3.6), the descriptor build needs far fewer registers (no per-element
offset tensors): at d128 causal 64x64 4 warps, dK/dV spills 48 bytes instead of 328 and dQ uses
164 registers instead of 234. TMA needs 16-byte aligned bases and strides, so anything else
takes the pointer build; so do float32 (not a speed path) and head dims above 128 (with
256-wide tiles the descriptor dK/dV kernel spilled kilobytes, e.g. d192 64x32: 6,880 bytes of
stack against 384 for the pointer build). FLASHGEN_BWD_TMA=0 forces pointers, =1 forces
descriptors (also in the CPU interpreter, which is how the tests cover that path); the `tma`
argument of `backward` overrides both.

Host time: as in `flashgen.kernels.fwd`, what a call signature decides (spec, config, kernel build,
grids, strides, descriptor templates, the compiled kernels) is kept in a `_Plan`, so a repeated
signature allocates its outputs and launches (`flashgen.kernels.launch.Launch`) without Triton's
per-call binding. The same CUDA-graph rules hold (no sync; alignment in the key; a plan first
needed during capture skips the database and is not kept). `config` as in `flashgen.kernels.fwd`
(`flashgen.kernels.plans`).

Which kind of backward runs ("split" above, "onepass", "hopper") is decided in
`flashgen.kernels.bwd_kind`; this module builds and runs that kind's launches. A one-pass plan
takes the split kind's record or default when the shared-memory model says it fits the one-pass
kernel, else `flashgen.hardware.tiles.config_for_kind`.
"""

from __future__ import annotations

import functools
import logging

import torch

from ..core.config import TileConfig
from ..core.spec import cdiv, dtype_name, next_pow2, spec_for
from ..hardware.dq_tiles import dq_config as _dq_config
from ..hardware.sram import current_device
from ..hardware.tiles import config_for_kind
from . import block_mask, bwd_kind, hopper_bwd
from . import tma as _tma
from .buffers import pause_fill, resume_fill
from .codegen import load, load_family
from .fwd import mask_kind as _mask_kind
from .fwd import mask_shared as _mask_shared
from .launch import Launch, direct_device
from .plans import (
    Chooser,
    PlanCache,
    clamp_window,
    extra_classes,
    plan_config,
    plan_spec,
    variant_args,
)
from .streams import side_first, side_stream

log = logging.getLogger("flashgen")
_ENV = "FLASHGEN_BWD_TMA"
_env = _tma.env_reader(_ENV)
_plans = PlanCache()  # `flashgen.runtime.primitives` clears it with the run-time choice's cache


def dq_config_for(spec, config: TileConfig, per_key: bool = False) -> TileConfig:
    """The dQ kernel's config when the backward's `config` was chosen at run time (records,
    defaults) or by the tuner: `flashgen.hardware.dq_tiles.dq_config` on the current device
    (`per_key`: the mask tensor is a key-padding mask)."""
    return _dq_config(spec, config, current_device().capability, per_key)


def _last_dim_contiguous(t):
    """The kernels take every stride but the last, which must be 1 (e.g. an expanded dO from
    `out.sum().backward()` has stride 0 everywhere)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _use_tma(*tensors, forced=None) -> bool:
    """Whether `backward` takes the descriptor kernels for these (last-dim contiguous) tensors:
    the ones it makes descriptors of; only 16-bit inputs with head dim <= 128 (the builds that
    fit and measured faster)."""
    first = tensors[0]
    eligible = first.element_size() == 2 and first.shape[-1] <= 128
    return _tma.use_tma(_ENV, tensors, eligible=eligible, forced=forced)


def _strides3(t) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


class _Plan:
    """One call signature's backward: up to three kernel launches and their fixed arguments
    (no device memory: see `flashgen.kernels.fwd._Plan`)."""

    __slots__ = (
        "pre", "pre_tail", "dkdv", "dq", "strides", "ints", "keep", "onepass", "convert",
        "bounded", "tiles", "dq_delta", "out_strides", "row_keys", "short",
    )  # fmt: skip

    def __init__(
        self, q, k, v, do, out, causal, config, needs, use_descriptors, aligned, windowed, capped,
        kind="split", bounded=False, mask_kind="", dropped=False, dq_config=None, per_key=False,
        alibi=False, shared=0, sparse=False,
    ):  # fmt: skip
        batch, heads_q, seq_q, dim = q.shape
        heads_kv, seq_k = k.shape[1], k.shape[2]
        spec = plan_spec(q, "bwd", causal, windowed, capped, bounded, mask_kind, dropped, alibi)
        explicit = config
        self.keep = True
        self.bounded = bounded
        self.short = None
        if kind == "split" and not isinstance(config, TileConfig) and _short(spec, q, k, needs):
            # its own tiles (`short_config`): no record or default to look up
            self._short(q, k, v, do, out, spec, direct_device(q, aligned))
            return
        if not isinstance(config, TileConfig):
            config, self.keep = plan_config(config, spec, seq_q, seq_k, q)
            if dq_config is None:  # a config chosen at run time: the dQ kernel's own for it
                dq_config = dq_config_for(spec, config, per_key)
            if kind != "split":  # records and defaults are the split kind's configs
                config = config_for_kind(spec, config, current_device(), kind)
        module = load(spec)
        block_m, block_n = config.block_m, config.block_n
        device = direct_device(q, aligned)
        blocks = {"BLOCK_M": block_m, "BLOCK_N": block_n}
        # a mask constant along query rows (key padding) is read as one vector per tile; the
        # programs sharing a mask tensor are launched side by side (`fwd.mask_shared`)
        per_key_arg = {"MASK_PER_KEY": per_key, "MASK_SHARED": shared} if mask_kind else {}
        options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
        pre_grid = (cdiv(seq_q, block_m), batch * heads_q)
        self.pre_tail = (*_strides3(out), *_strides3(do), heads_q, seq_q)
        self.row_keys = False  # dropout's row keys stored by the preprocess (below)
        self.ints = (heads_q, heads_kv, seq_q, seq_k)
        self.onepass = self.convert = None
        self.strides = ()
        self.dq_delta = None  # the dQ kernel that computes delta itself (`launch`)
        self.out_strides = _strides3(out)
        # a boolean mask's dK/dV and dQ kernels take the block-sparse lists' arguments last:
        # None (no such arguments), or (sparse, the dK/dV launch's blocks, the dQ launch's)
        self.tiles = None
        if kind == "onepass":
            self.pre = Launch(
                module.attn_bwd_preprocess, pre_grid, {"BLOCK_M": block_m}, {}, device
            )
            self._onepass(q, k, v, do, spec, blocks, options, device, use_descriptors)
            self.dkdv = self.dq = None
            return
        if use_descriptors:  # q, k, v, do travel as TMA descriptors
            pairs = ((q, block_m), (k, block_n), (v, block_n), (do, block_m))
            descs = tuple(
                (i, _tma.descriptor_template(t, rows, spec.block_d))
                for i, (t, rows) in enumerate(pairs)
            )
            self.strides = ()
            dkdv, dq = module.attn_bwd_dkdv_tma, module.attn_bwd_dq_tma
        else:
            descs = ()
            self.strides = (*_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do))
            dkdv, dq = module.attn_bwd_dkdv, module.attn_bwd_dq
        need_dq, need_dk, need_dv = needs
        dkdv_grid = (cdiv(seq_k, block_n), batch * heads_kv)
        # a boolean mask's block-sparse walk (`block_mask`; lists per key block for dK/dV)
        sparse_arg = {"BLOCK_SPARSE": sparse} if mask_kind == "bool" else {}
        # The Hopper template's dK/dV kernel where `hopper_bwd.dkdv_choice` picks it: a config
        # chosen at run time only (an explicit TileConfig names the portable kernel's tiles).
        hop = (
            hopper_bwd.dkdv_choice(spec, q, k, v, do)
            if (need_dk or need_dv) and use_descriptors and not isinstance(explicit, TileConfig)
            else None
        )
        if hop is not None:
            self.dkdv = hopper_bwd.DkdvLaunch(spec, hop, q, k, v, do, device)
        elif need_dk or need_dv:
            self.dkdv = Launch(
                dkdv, dkdv_grid, {**blocks, **per_key_arg, **sparse_arg}, options, device, descs
            )
            # with dropout this dK/dV kernel reads each query row's dropout key, which the
            # preprocess stores (hashed in the kernel, every thread holding a row's column of
            # its transposed tile hashed it again)
            self.row_keys = dropped
        else:
            self.dkdv = None
        pre = module.attn_bwd_preprocess_drop if self.row_keys else module.attn_bwd_preprocess
        self.pre = Launch(pre, pre_grid, {"BLOCK_M": block_m}, {}, device)
        dq_tiles = (block_m, block_n)  # (the dQ launch's own, below, when there is one)
        self.dq = None
        if need_dq:
            dqc = dq_config if dq_config is not None else config
            dq_blocks = {"BLOCK_M": dqc.block_m, "BLOCK_N": dqc.block_n, **per_key_arg}
            dq_blocks.update(sparse_arg)
            dq_tiles = (dqc.block_m, dqc.block_n)
            dq_options = {"num_warps": dqc.num_warps, "num_stages": dqc.num_stages}
            if use_descriptors:
                pairs = ((q, dqc.block_m), (k, dqc.block_n), (v, dqc.block_n), (do, dqc.block_m))
                descs = tuple(
                    (i, _tma.descriptor_template(t, rows, spec.block_d))
                    for i, (t, rows) in enumerate(pairs)
                )
            dq_grid = (cdiv(seq_q, dqc.block_m), batch * heads_q)
            self.dq = Launch(dq, dq_grid, dq_blocks, dq_options, device, descs)
            if not spec.has_extras and _own_delta_env() not in ("0", b"0"):
                own = module.attn_bwd_dq_delta_tma if use_descriptors else module.attn_bwd_dq_delta
                self.dq_delta = Launch(own, dq_grid, dq_blocks, dq_options, device, descs)
        if mask_kind == "bool":
            self.tiles = (sparse, (block_m, block_n), dq_tiles)

    def _short(self, q, k, v, do, out, spec, device):
        """The one launch of `attn_bwd_short` (`_short` said the call fits it): one program per
        (batch entry, kv head), its tiles from the lengths (`short_config`); the other
        launches' slots empty."""
        batch, heads_q, seq_q, _ = q.shape
        heads_kv, seq_k = k.shape[1], k.shape[2]
        cfg = short_config(spec, seq_q, seq_k)
        blocks = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n}
        options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        kernel = load(spec).attn_bwd_short
        self.short = Launch(kernel, (batch * heads_kv,), blocks, options, device)
        self.strides = (*_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do))
        self.out_strides = _strides3(out)
        self.ints = (heads_q, heads_kv, seq_q, seq_k)
        self.pre = self.dkdv = self.dq = self.onepass = self.convert = None
        self.dq_delta = self.tiles = None
        self.pre_tail = ()
        self.row_keys = False

    def _onepass(self, q, k, v, do, spec, blocks, options, device, use_descriptors):
        """The "onepass" kind's two launches: the one-pass kernel (all three gradients; dK/dV
        are cheap beside dQ's products, so `needs` does not trim it) and the dQ conversion."""
        batch, heads_q, seq_q, _ = q.shape
        heads_kv, seq_k = k.shape[1], k.shape[2]
        block_m, block_n = blocks["BLOCK_M"], blocks["BLOCK_N"]
        module = load_family(spec, "onepass")
        grid = (cdiv(seq_k, block_n), batch * heads_kv)
        if use_descriptors:
            pairs = ((q, block_m), (k, block_n), (v, block_n), (do, block_m))
            descs = [
                (i, _tma.descriptor_template(t, rows, spec.block_d))
                for i, (t, rows) in enumerate(pairs)
            ]
            acc_shape = [batch, heads_q, seq_q, spec.block_d]
            acc_strides = [heads_q * seq_q * spec.block_d, seq_q * spec.block_d, spec.block_d, 1]
            descs.append((9, (acc_shape, acc_strides, [1, 1, block_m, spec.block_d])))
            constexprs = {**blocks, "DQ_TMA": _dq_tma()}
            self.onepass = Launch(
                module.attn_bwd_onepass_tma, grid, constexprs, options, device, tuple(descs)
            )
        else:
            self.strides = (*_strides3(q), *_strides3(k), *_strides3(v), *_strides3(do))
            self.onepass = Launch(module.attn_bwd_onepass, grid, blocks, options, device)
        self.convert = Launch(
            module.attn_bwd_dq_convert,
            (cdiv(seq_q, block_m), batch * heads_q),
            {"BLOCK_M": block_m},
            {},
            device,
        )

    def launch(
        self, do, q, k, v, out, lse, scale: float, window=None, softcap=None, bounds=None,
        mask=None, dropout=None, alibi=None, rows_whole=False,
    ):  # fmt: skip
        if self.short is not None:
            return self._launch_short(do, q, k, v, out, lse, scale)
        if self.onepass is not None:
            delta = torch.empty_like(lse)  # lse is contiguous float32 [B, Hq, Sq]
            self.pre(out, do, delta, *self.pre_tail)
            return self._launch_onepass(do, q, k, v, lse, delta, scale)
        tail = variant_args(scale, window, softcap, bounds, mask, dropout, alibi)
        ints = (*self.ints, float(scale), *tail)
        dq_ints = dkdv_ints = ints
        if self.tiles is not None:  # the block-sparse lists, or placeholders not read
            sparse, dkdv_blocks, dq_blocks = self.tiles
            unread = (mask, mask, 0, 0)
            if self.dkdv is not None:
                lists = block_mask.tile_lists(mask, *dkdv_blocks, per="key") if sparse else unread
                dkdv_ints = (*ints, *lists)
            if self.dq is not None:
                dq_ints = (*ints, *(block_mask.tile_lists(mask, *dq_blocks) if sparse else unread))
        # The kernels write every element of delta, dQ, dK and dV (key rows no query sees get
        # zeros), except that with lengths dQ's rows outside the bounds and dK/dV's before the
        # key start are not stored and must be zero: dQ's only where some query row is outside
        # the bounds, dK/dV's only where a key range may start past 0 (`rows_whole`: the
        # bounds are a key-padding mask's key range, which starts at 0). So no
        # deterministic-mode fill (`flashgen.kernels.buffers`).
        refill = pause_fill()
        try:
            delta = torch.empty_like(lse)  # lse is contiguous float32 [B, Hq, Sq]
            # dropout's row keys, laid out as delta (every element stored by the preprocess)
            row_keys = torch.empty_like(lse, dtype=torch.int32) if self.row_keys else None
            new = torch.zeros_like if self.bounded and not rows_whole else torch.empty_like
            dq = dk = dv = None
            if self.dq is not None:
                dq = new(q, memory_format=torch.contiguous_format)
            if self.dkdv is not None:
                dk = new(k, memory_format=torch.contiguous_format)
                dv = new(v, memory_format=torch.contiguous_format)
        finally:
            if refill:
                resume_fill()
        side = side_stream(q) if self.dkdv is not None and dq is not None else None
        if side is None and self.dq_delta is not None:
            # one stream: the dQ kernel computes delta, then the dK/dV kernel reads it
            self.dq_delta(q, k, v, do, lse, delta, dq, out, *self.out_strides, *self.strides, *ints)
            if self.dkdv is not None:
                self.dkdv(q, k, v, do, lse, delta, dk, dv, *self.strides, *ints)
            return dq, dk, dv
        if row_keys is not None:
            self.pre(out, do, delta, row_keys, *self.pre_tail, int(dropout[1]))  # (the seed)
            dkdv_ints = (*dkdv_ints, row_keys)
        else:
            self.pre(out, do, delta, *self.pre_tail)
        if side is not None:  # the dQ kernel beside the dK/dV kernel (`flashgen.kernels.streams`)
            main = torch.cuda.current_stream(q.device)
            side.wait_stream(main)
            dq_first = side_first()
            if dq_first:
                with torch.cuda.stream(side):
                    self.dq(q, k, v, do, lse, delta, dq, *self.strides, *dq_ints)
        if self.dkdv is not None:
            self.dkdv(q, k, v, do, lse, delta, dk, dv, *self.strides, *dkdv_ints)
        if side is not None:
            if not dq_first:
                with torch.cuda.stream(side):
                    self.dq(q, k, v, do, lse, delta, dq, *self.strides, *dq_ints)
            main.wait_stream(side)
        elif dq is not None:
            self.dq(q, k, v, do, lse, delta, dq, *self.strides, *dq_ints)
        return dq, dk, dv

    def _launch_short(self, do, q, k, v, out, lse, scale):
        # every element of dQ, dK and dV is stored: no deterministic-mode fill
        refill = pause_fill()
        try:
            dq = torch.empty_like(q, memory_format=torch.contiguous_format)
            dk = torch.empty_like(k, memory_format=torch.contiguous_format)
            dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        finally:
            if refill:
                resume_fill()
        self.short(q, k, v, do, lse, dq, dk, dv, out, *self.out_strides, *self.strides,
                   *self.ints, float(scale))  # fmt: skip
        return dq, dk, dv

    def _launch_onepass(self, do, q, k, v, lse, delta, scale):
        batch, heads_q, seq_q, dim = q.shape
        block_d = 1 << (dim - 1).bit_length()
        acc = torch.zeros((batch, heads_q, seq_q, block_d), dtype=torch.float32, device=q.device)
        dk = torch.empty_like(k, memory_format=torch.contiguous_format)
        dv = torch.empty_like(v, memory_format=torch.contiguous_format)
        scale = float(scale)
        if self.strides:
            self.onepass(q, k, v, do, lse, delta, dk, dv, acc, *self.strides, *self.ints, scale)
        else:
            self.onepass(q, k, v, do, lse, delta, dk, dv, acc, acc, *self.ints, scale)
        dq = torch.empty_like(q, memory_format=torch.contiguous_format)
        self.convert(acc, dq, seq_q, scale)
        return dq, dk, dv


_PLAIN = "plain"  # the first entry of `backward_plain`'s plan keys (no general key starts so)
_HOPPER = "hopper"  # the first entry of the hopper kind's plan keys


def backward_plain(do, q, k, v, out, lse, causal: bool, scale: float, config, needs, deterministic):
    """`backward` of a call without extras (no window, softcap, bounds, mask, dropout or ALiBi)
    for the eager path every short call takes (`flashgen.runtime.primitives.plain_backward`):
    the same plans and launches, keyed on what such a call can vary in, with the choices the
    general path makes at every call (tensor layouts, the kind) made once when the plan is
    built. On the H200's host `plain_backward` through it took 54-56 µs a launch-bound call
    against 63 through `backward` (benchmarks/RESULTS.md, session 16 B4, host steps).
    `deterministic` is a bool (the autograd node resolved it). Calls the general path where a
    plan is not for this path: the hopper kind (or a `hopper_bwd.AUTO` entry that may take
    the call's key length), empty or
    non-contiguous tensors."""
    if hopper_bwd.auto_possible(k.shape[2]):  # may take the hopper kind (no plan)
        return backward(do, q, k, v, out, lse, causal=causal, scale=scale, config=config,
                        needs=needs, deterministic=deterministic)  # fmt: skip
    aligned = not (
        (q.data_ptr() | k.data_ptr() | v.data_ptr() | do.data_ptr() | out.data_ptr()
         | lse.data_ptr()) & 15
    )  # fmt: skip
    key = (_PLAIN, q.shape, k.shape, q.stride(), k.stride(), v.stride(), do.stride(),
           out.stride(), lse.stride(), q.dtype, q.device, causal, config, needs, deterministic,
           aligned, _env(), bwd_kind._kind_env(), _dq_tma_env(),
           hopper_bwd.dkdv_env())  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        plan = _plain_plan(do, q, k, v, out, lse, causal, config, needs, deterministic, aligned)
        if plan is None:
            return backward(do, q, k, v, out, lse, causal=causal, scale=scale, config=config,
                            needs=needs, deterministic=deterministic)  # fmt: skip
        _plans.store(key, plan, q)
    dq, dk, dv = plan.launch(do, q, k, v, out, lse, scale)
    return dq, (dk if needs[1] else None), (dv if needs[2] else None)


def _plain_plan(do, q, k, v, out, lse, causal, config, needs, deterministic, aligned):
    """The plan `backward` would build for this call without extras, or None where the
    general path must run it (see `backward_plain`)."""
    if not (needs[0] or needs[1] or needs[2]) or q.numel() == 0 or k.numel() == 0:
        return None
    if not lse.is_contiguous() or any(t.stride(-1) != 1 for t in (q, k, v, do, out)):
        return None
    spec = spec_for(q.shape[-1], causal, dtype_name(q.dtype), "bwd")
    kind = bwd_kind.for_call(deterministic, None, spec, k.shape[2], split_only=not needs[0],
                             group=q.shape[1] // k.shape[1])  # fmt: skip
    if kind == "hopper":
        return None
    descriptors = _use_tma(q, k, v, do, forced=_env())
    return _Plan(q, k, v, do, out, causal, config, needs, descriptors, aligned, False, False, kind)


class _Refused:
    """The plan-cache entry of a hopper-kind call signature whose tensors the kind cannot run
    (`hopper_bwd.usable`'s answer depends only on what the key holds)."""

    __slots__ = ()
    keep = True


def _hopper(
    do, q, k, v, out, lse, causal, scale, config, aligned, bounds=None, mask=None, window=None,
    softcap=None, alibi=None, dropout=None, rows_whole=False,
):  # fmt: skip
    """The "hopper" kind's gradients, or None (logged once per reason) where it cannot run
    these tensors. A portable `config` (TileConfig or chooser) does not apply to it. Its
    launches are a `hopper_bwd.Plan` kept per call signature like the split kind's (direct
    launches after the first call: less host time than Triton's JIT path); whether the kind
    can run the tensors is asked once per signature too (TMA needs q, k, v and dO aligned:
    `tma_ok`, with the strides and device the key holds). `bounds`: a lengths call's
    SeqBounds (the kernel's rendering with lengths); `mask`: a mask tensor with them, which
    the kind runs only as a key-padding mask (`hopper_bwd.usable`), `bounds` then its key range
    (`flashgen.runtime.primitives._backward_bounds`); `window`: (left, right) as clamped for
    the launch (`plans.clamp_window`), `softcap` (the cap), `alibi` (the checked slopes) and
    `dropout` ((p, seed)): run-time arguments of the renderings with them; `rows_whole` as in
    `backward`."""
    cfg = config if isinstance(config, hopper_bwd.HopperBwdConfig) else None
    tma_ok = aligned or not ((q.data_ptr() | k.data_ptr() | v.data_ptr() | do.data_ptr()) & 15)
    lengths = bounds is not None
    kind = _mask_kind(mask)
    masked = None if mask is None else (mask.dtype, mask.stride())
    key = (_HOPPER, q.shape, k.shape, q.stride(), k.stride(), v.stride(), do.stride(),
           out.stride(), q.dtype, q.device, causal, cfg, aligned, tma_ok, lengths,
           masked, window is not None, softcap is not None, alibi is not None,
           dropout is not None)  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        spec = spec_for(q.shape[-1], causal, dtype_name(q.dtype), "bwd", window is not None,
                        softcap is not None, lengths, kind, dropout is not None,
                        alibi=alibi is not None)  # fmt: skip
        reason = hopper_bwd.usable(spec, q, k, v, do, mask=mask)
        if reason is not None:
            _log_fallback(spec, reason)
            plan = _Refused()
        else:
            cfg = hopper_bwd.checked_config(spec, cfg, True, k.shape[2], q.shape[1] // k.shape[1])
            plan = hopper_bwd.Plan(spec, cfg, q, k, v, do, out, direct_device(q, aligned))
        _plans.store(key, plan, q)
    if isinstance(plan, _Refused):
        return None
    scale = float(scale)
    extras = variant_args(scale, window, softcap, None, None, dropout, alibi)
    return plan(
        do, q, k, v, out, lse, scale, bounds=bounds, mask=mask, extras=extras,
        rows_whole=rows_whole,
    )  # fmt: skip


@functools.cache
def _log_fallback(spec, reason: str) -> None:
    log.info("flashgen: %s runs the split backward, not the hopper kind: %s", spec.uri(), reason)


# The split kind's calls short enough for `attn_bwd_short` (one launch instead of two or
# three). Every key of a kv head fits one block (SHORT_MAX_K); a program walks its (query head,
# query block of SHORT_BLOCK_M rows) steps in turn, where the split kernels' grids run them side
# by side, so the walk is bounded: at most SHORT_WIDE_STEPS steps, or SHORT_MAX_STEPS with at
# most one program an SM (batch x kv heads <= the SM count). Timed on an H100 (session 50,
# benchmarks/RESULTS.md; one do_bench reading a shape), the backward alone against the split
# kernels, B x H x S: 1.24-1.81x inside those bounds (1 x 1 x 128 and 4 x 8 x 64 to 8 x 16 x
# 128), 1.33-1.38x with 2 steps and 384-1,024 programs (32 x 12 x 128, 64 x 16 x 77), 0.995x
# with 4 steps and 256 programs (16 x 16 x 256) and 0.942x with 8 (GQA 4 x 2 blocks): outside.
# FLASHGEN_BWD_SHORT=0: plans built from then on do not take it.
SHORT_MAX_K = 128
SHORT_BLOCK_M = 64
SHORT_MAX_STEPS = 4
SHORT_WIDE_STEPS = 2
_short_env = _tma.env_reader("FLASHGEN_BWD_SHORT")


def _short(spec, q, k, needs) -> bool:
    """Whether a split-kind call of `spec` runs `attn_bwd_short`: no extras, dQ and dK or dV
    wanted (dQ alone is one launch already), head dim <= 128, the bounds above, and
    FLASHGEN_BWD_SHORT not 0; on CUDA only 16-bit inputs on sm_90 (its largest tiles take
    148 KB of shared memory there, compiled ahead of time in the tests: more than sm_86/89
    have; float32 is not a speed path). The CPU interpreter runs it for every dtype, which is
    how the tests check its arithmetic in float32."""
    batch, heads_q, seq_q = q.shape[0], q.shape[1], q.shape[2]
    heads_kv, seq_k = k.shape[1], k.shape[2]
    if not (
        not spec.has_extras
        and needs[0]
        and (needs[1] or needs[2])
        and spec.block_d <= 128
        and seq_k <= SHORT_MAX_K
        and _short_env() not in ("0", b"0")
    ):
        return False
    device = current_device()
    if q.is_cuda and (q.element_size() != 2 or device.capability[0] != 9):
        return False
    steps = (heads_q // heads_kv) * cdiv(seq_q, SHORT_BLOCK_M)
    return steps <= SHORT_WIDE_STEPS or (
        steps <= SHORT_MAX_STEPS and batch * heads_kv <= device.sm_count
    )


def short_config(spec, seq_q: int, seq_k: int) -> TileConfig:
    """`attn_bwd_short`'s tiles: every key in one block (a power of two >= 16), query blocks of
    up to SHORT_BLOCK_M rows, 8 warps once the key block's K, V, dK and dV outgrow 64 x 64 per
    warp group."""
    block_n = max(16, next_pow2(seq_k))
    block_m = max(16, min(SHORT_BLOCK_M, next_pow2(seq_q)))
    warps = 4 if block_n * spec.block_d <= 64 * 64 else 8
    return TileConfig(block_m, block_n, warps, 2)


_dq_tma_env = _tma.env_reader("FLASHGEN_BWD_DQ_TMA")
# FLASHGEN_BWD_OWN_DELTA=0: plans built from then on launch attn_bwd_preprocess before the dQ
# kernel even where the two kernels run on one stream (for comparisons; see `_Plan.launch`)
_own_delta_env = _tma.env_reader("FLASHGEN_BWD_OWN_DELTA")


def _dq_tma() -> bool:
    """Whether the one-pass TMA build adds dQ partials by TMA reduce (FLASHGEN_BWD_DQ_TMA=1)
    rather than element atomics; the interpreter has no TMA reduce."""
    return _dq_tma_env() in ("1", b"1")


def backward(
    do,
    q,
    k,
    v,
    out,
    lse,
    *,
    causal: bool,
    scale: float,
    config: TileConfig | Chooser | None = None,
    needs: tuple[bool, bool, bool] = (True, True, True),
    tma: bool | None = None,
    window: tuple[int, int] | None = None,
    softcap: float | None = None,
    deterministic: bool | None = None,
    kind: str | None = None,
    bounds=None,
    mask=None,
    dropout=None,
    dq_config: TileConfig | None = None,
    alibi=None,
    rows_whole: bool = False,
):
    """Gradients of `out = attention(q, k, v)` given `do = dL/d out`.

    Shapes as in `flashgen.kernels.fwd.forward`: q/do/out [B, Hq, Sq, D], k/v [B, Hkv, Sk, D],
    lse float32 [B, Hq, Sq] (natural log). Returns (dq, dk, dv), each a new contiguous tensor
    in the input's dtype shaped like its input, or None where `needs` says it is not wanted.
    `tma` picks the kernel build (None: `_use_tma` decides); benchmarks use it to compare.
    Launch plans are cached per call signature as in `flashgen.kernels.fwd`. `window` as in
    `flashgen.kernels.fwd.forward` (the same pair the forward was given), `softcap`,
    `bounds` (per-sequence valid ranges, either build) and `mask` (the expanded
    [B, Hq, Sq, Sk] boolean or additive mask; no gradient for it) and `dropout` ((p, seed),
    the forward's) likewise.
    `deterministic` (None: `torch.are_deterministic_algorithms_enabled()`) and `kind` pick the
    backward kind (`flashgen.kernels.bwd_kind`) from the call's spec: `alibi` (the forward's
    slopes, no gradient for them), and mask tensors other than key-padding masks run the split
    kind; lengths, key-padding masks, windows, softcap, ALiBi and dropout the split kind too
    unless the hopper kind is asked for or `hopper_bwd.AUTO_EXTRAS` / `AUTO_WINDOW` /
    `AUTO_SCORE_MODS` lists them.
    `dq_config`: the split kind's dQ kernel's own config (blocks, warps, stages), which may
    differ from the dK/dV kernel's `config`; None: see the module docstring.
    `rows_whole`: `bounds` leave every query row valid and start every key range at 0
    (`padding.key_hull`'s): the dQ kernel then stores every row and the dK/dV kernel every key
    row (zeros past the range), so none of the three is zero-filled first.
    """
    window = clamp_window(window, causal, q.shape[2], k.shape[2])  # as the forward does
    need_dq, need_dk, need_dv = needs = (bool(needs[0]), bool(needs[1]), bool(needs[2]))
    if not (need_dq or need_dk or need_dv):
        return None, None, None
    if q.numel() == 0 or k.numel() == 0:  # empty batch or heads: nothing to launch
        grads = (torch.zeros_like(t) if n else None for t, n in zip((q, k, v), needs, strict=True))
        return tuple(grads)
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    do = _last_dim_contiguous(do)
    out = _last_dim_contiguous(out)
    lse = lse.contiguous()
    aligned = not (
        (q.data_ptr() | k.data_ptr() | v.data_ptr() | do.data_ptr() | out.data_ptr()
         | lse.data_ptr()) & 15
    )  # fmt: skip
    forced = _env() if tma is None else tma
    # The call's whole spec: which kind has a kernel for it is the kinds' own answer
    # (`bwd_kind`: the one-pass kind has no extras, the hopper kind lengths and key-padding
    # masks; every other extra is the split kind's).
    spec = spec_for(
        q.shape[-1], causal, dtype_name(q.dtype), "bwd", window is not None, softcap is not None,
        bounds is not None, _mask_kind(mask), dropout is not None, alibi=alibi is not None,
    )  # fmt: skip
    kind = bwd_kind.for_call(deterministic, kind, spec, k.shape[2], split_only=not need_dq,
                             group=q.shape[1] // k.shape[1])  # fmt: skip
    if kind == "hopper":
        grads = _hopper(
            do, q, k, v, out, lse, causal, scale, config, aligned, bounds, mask, window, softcap,
            alibi, dropout, rows_whole,
        )  # fmt: skip
        if grads is not None:
            return tuple(g if n else None for g, n in zip(grads, needs, strict=True))
        kind = "split"
    key = (q.shape, k.shape, q.stride(), k.stride(), v.stride(), do.stride(), out.stride(),
           q.dtype, q.device, causal, config, needs, forced, aligned, hopper_bwd.dkdv_env(),
           window is not None, softcap is not None, kind, kind == "onepass" and _dq_tma(),
           bounds is not None, _mask_kind(mask), None if mask is None else mask.stride(),
           dropout is not None, dq_config, extra_classes(window, bounds, mask, alibi))  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        descriptors = tma if tma is not None else _use_tma(q, k, v, do, forced=forced)
        per_key = mask is not None and mask.stride(2) == 0
        plan = _Plan(
            q,
            k,
            v,
            do,
            out,
            causal,
            config,
            needs,
            descriptors,
            aligned,
            window is not None,
            softcap is not None,
            kind,
            bounds is not None,
            _mask_kind(mask),
            dropout is not None,
            dq_config,
            per_key,
            alibi is not None,
            _mask_shared(mask),
            block_mask.eligible(
                mask, causal, window, bounds, per_key, sq=q.shape[2], sk=k.shape[2]
            ),
        )
        _plans.store(key, plan, q)
    dq, dk, dv = plan.launch(
        do, q, k, v, out, lse, scale, window, softcap, bounds, mask, dropout, alibi, rows_whole
    )
    return dq, (dk if need_dk else None), (dv if need_dv else None)
