"""Host launcher for split-KV decode attention (templates/attn_decode.py.jinja).

Why a separate path: the forward kernel runs one program per (query block, batch, head). With
one query row per sequence that is 8-32 programs at batch 1 on a 132-SM GPU, each reading a
whole KV cache: the H200 read the cache at 0.17-1 TB/s where SDPA reached 3.3-3.9 TB/s
(issue 17). Here the query heads sharing a kv head are packed into one tile (K/V read once per
kv head) and the keys are split across programs; a second small kernel merges the splits by
log-sum-exp. With one split the first kernel writes the output itself (FINAL) and the merge is
skipped.

`decode_forward(q, k, v, causal_offset=..., scale=...)` returns (out, lse) exactly like
`flashgen.kernels.fwd.forward` (lse: natural log, +inf for a row that sees no key), so the
backward (`flashgen.kernels.bwd`) works from it unchanged. `causal_offset` None: no mask;
an int c: query i sees keys j <= i + c (0: SDPA's top-left is_causal; seq_k - seq_q: the
bottom-right alignment of a KV cache). `mask`: SDPA's attn_mask, broadcastable to
[B, Hq, Sq, Sk], boolean (True: visible) or additive, checked by
`flashgen.kernels.validate.expand_mask`; the kernel reads it with stride 0 along broadcast dims
(nothing is copied), key block by key block, together with the causal offset. That is how HF's `generate()` masks (a KV cache's causal part and its padding, whatever they are)
reach these kernels exactly. `alibi`: ALiBi slopes (float32 [B, Hq], as
`flashgen.kernels.alibi.check_slopes` gives them), slope * (j - i) added in the kernel, with a
boolean mask or none (a KV cache's decode step of BLOOM / MPT-style models): the lse is that of
`flashgen.kernels.fwd.forward` with the same slopes, so the backward takes it unchanged.

Per call the host does: one dict lookup of everything the call signature fixes (`_Call`: the
launch plan, the integer arguments, the mask's strides), two or four allocations and one or two
direct launches (`flashgen.kernels.launch`). Why so little: a compiled `generate()` is
host-bound (a small model's decoding step is a few hundred µs of GPU work and milliseconds of
host work), so every microsecond of an attention call is a microsecond per token. A static
cache's steps repeat one signature exactly. A new signature (a dynamic cache's longer key
sequence) goes through `_prepare`, which reuses the launch plan of its bucket: a plan is keyed
by everything that changes the compiled kernel or the grid, but NOT by the key length itself.
The split length is a run-time argument computed per signature; Triton specialises integer
arguments on divisibility by 16 and on being 1, so the plan key carries those bits of every
integer argument (a direct launch must pass exactly what the compiled kernel was specialised
for).
"""

from __future__ import annotations

import math

import torch

from ..core.spec import cdiv, dtype_name, next_pow2, spec_for
from ..hardware import decode as hw
from . import tma
from .codegen import load_family
from .launch import Launch, capturing, direct_device
from .layout import new_out
from .plans import PlanCache
from .validate import expand_mask

LOG2E = 1.4426950408889634
# K/V through TMA descriptors (`attn_decode_split_tma`): FLASHGEN_DECODE_TMA=1 / 0 forces it
# on / off; unset, TMA_DEFAULT decides (where the tensors allow: Hopper, 16-byte alignment).
# Off until measured faster on the GPU (benchmarks/RESULTS.md, decode attention).
TMA_DEFAULT = False
_ENV = "FLASHGEN_DECODE_TMA"
_env = tma.env_reader(_ENV)
_MAX_PLANS = 4096
_plans: dict[tuple, _Plan] = {}
# Call signature -> `_Call` (a PlanCache: `flashgen.kernels.plans.clear_all` empties it too).
_calls: dict[tuple, _Call] = PlanCache()


def applies(q, k, window=None, softcap=None) -> bool:
    """Whether a call goes to the decode kernels: a short query (1..MAX_DECODE_Q rows), no
    sliding window, no softcap (those stay with the forward kernels)."""
    return window is None and softcap is None and q.shape[2] <= hw.MAX_DECODE_Q


def takes_alibi(mask, causal_offset) -> bool:
    """Whether the decode kernels run an ALiBi call that `applies`: with no mask or a boolean
    one (not an additive mask, whose hidden-row test reads the scores' size), and a causal
    offset, if any, that hides no query row whole (offset >= 0: a bottom-right diagonal with
    more queries than keys runs the forward kernels on the rows that see keys, which count
    ALiBi's i from the first of them)."""
    if mask is not None and mask.dtype != torch.bool:
        return False
    return causal_offset is None or causal_offset >= 0


def _spec_bits(ints) -> tuple:
    """What Triton's JIT specialises an int argument on: divisible by 16, equal to 1."""
    return tuple((n % 16 == 0) + 2 * (n == 1) for n in ints)


def split_len(seq_k: int, cfg: hw.DecodeConfig) -> int:
    """Keys per split: the keys shared out over the splits, rounded up to a multiple of
    BLOCK_N (trailing splits may be empty; they write weight-zero partials)."""
    per = cdiv(seq_k, cfg.num_splits)
    return cdiv(per, cfg.block_n) * cfg.block_n


class _Plan:
    """One signature's launches: the split kernel, and the merge kernel when splits > 1."""

    __slots__ = ("split", "combine", "cfg", "final", "fixed", "scale")

    def __init__(
        self, q, k, v, causal: bool, cfg: hw.DecodeConfig | None, aligned: bool, ints, use_tma,
        mask_kind: str = "", alibi: bool = False,
    ):  # fmt: skip
        batch, hq, sq, dim = q.shape
        hkv, sk = k.shape[1], k.shape[2]
        group = hq // hkv
        dtype = dtype_name(q.dtype)
        if cfg is None:
            cfg = hw.default_config(dim, dtype, batch, hkv, group, sq, sk)
        self.cfg = cfg
        self.final = cfg.num_splits == 1
        self.scale = 1.0 / math.sqrt(dim)
        block_m = hw.row_block(group, sq)
        spec = spec_for(dim, causal, dtype, "fwd", attn_mask=mask_kind, alibi=alibi)
        module = load_family(spec, "decode")
        device = direct_device(q, aligned)
        rows = cdiv(group * sq, block_m)
        descs = ()
        if use_tma:  # K and V (arguments 1 and 2) as descriptors read BLOCK_N rows at a time
            descs = tuple(
                (i, tma.descriptor_template(t, cfg.block_n, next_pow2(dim)))
                for i, t in ((1, k), (2, v))
            )
        self.split = Launch(
            module.attn_decode_split_tma if use_tma else module.attn_decode_split,
            (cfg.num_splits, batch * hkv, rows),
            {"BLOCK_M": block_m, "BLOCK_N": cfg.block_n, "FINAL": self.final},
            {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            device,
            descs,
        )
        self.combine = None
        if not self.final:
            self.combine = Launch(
                module.attn_decode_combine,
                (batch * hq * sq,),
                {"BLOCK_S": next_pow2(cfg.num_splits)},
                {"num_warps": 4 if next_pow2(dim) * next_pow2(cfg.num_splits) >= 4096 else 2,
                 "num_stages": 1},
                device,
            )  # fmt: skip
        self.fixed = ints


def _ints(q, k, v, sl: int, splits: int, use_tma: bool) -> tuple:
    batch, hq, sq, _ = q.shape
    kv_strides = () if use_tma else (*k.stride()[:3], *v.stride()[:3])
    return (*q.stride()[:3], *kv_strides, hq, hq // k.shape[1], sq, k.shape[2], sl, splits)


def _use_tma(k, v) -> bool:
    forced = _env()
    if forced:
        return tma.use_tma(_ENV, (k, v), forced=forced)
    return TMA_DEFAULT and tma.use_tma(_ENV, (k, v))


def decode_forward(
    q, k, v, *, causal_offset: int | None, scale: float | None, config=None, mask=None,
    alibi=None,
):  # fmt: skip
    """Attention for a short query against a long key sequence: returns (out, lse).

    q [B, Hq, Sq, D] with 1 <= Sq <= 16, k/v [B, Hkv, Sk, D] (inputs that passed
    `flashgen.kernels.validate.check_inputs`). `config` (a `DecodeConfig`) overrides the
    default for the bucket (tuning, benchmarks). `mask`: None, or a boolean or floating tensor
    broadcastable to [B, Hq, Sq, Sk] (SDPA's attn_mask, checked by `validate.expand_mask`; an
    expanded view is fine too), applied with the causal offset. `alibi`: None, or the checked
    float32 [B, Hq] slopes (`flashgen.kernels.alibi.check_slopes`), where `takes_alibi`.

    A repeated call (a static cache's decoding steps: the same shapes, strides and offset every
    token) costs one dict lookup (`_calls`) besides the allocations and launches; a new
    signature goes through `_prepare`."""
    ptrs = q.data_ptr() | k.data_ptr() | v.data_ptr()
    mask_key = None
    if mask is not None:
        ptrs |= mask.data_ptr()
        mask_key = (mask.shape, mask.stride(), mask.dtype, mask.get_device())
    alibi_key = None
    if alibi is not None:
        ptrs |= alibi.data_ptr()
        alibi_key = alibi.stride(0)
    # Everything `_prepare` derives its result from, except the output buffers (fresh from the
    # allocator: 16-byte aligned) and the data pointers beyond their alignment.
    key = (q.shape, q.stride(), k.shape, k.stride(), v.stride(), q.dtype, q.get_device(),
           causal_offset, scale, config, not (ptrs & 15), mask_key, alibi_key, _env())  # fmt: skip
    call = _calls.get(key)
    if call is None:
        call = _prepare(q, k, v, causal_offset, scale, config, mask, not (ptrs & 15), alibi)
        if not capturing(q):
            if len(_calls) >= _MAX_PLANS:
                _calls.clear()
            _calls[key] = call
    out = new_out(q)  # (`flashgen.kernels.layout`: q's dimension order)
    lse = torch.empty(call.out_shape[:3], dtype=torch.float32, device=q.device)
    if call.plan is None:  # nothing to compute
        return out, lse
    tail = call.tail if mask is None else (*call.tail, mask, *call.mask_strides)
    if alibi is not None:
        tail = (*tail, alibi, alibi.stride(0))
    plan = call.plan
    if plan.final:
        # the split kernel writes a contiguous output: another layout (q's order, several
        # query rows of a [B, S, H, D] view; a single row is contiguous either way) gets a copy
        final = out if out.is_contiguous() else torch.empty(call.out_shape, dtype=q.dtype,
                                                            device=q.device)  # fmt: skip
        plan.split(q, k, v, final, lse, *call.ints, *tail)  # (K, V: descriptors with TMA)
        if final is not out:
            out.copy_(final)
        return out, lse
    part = torch.empty(call.part_shape, dtype=torch.float32, device=q.device)
    part_lse = torch.empty(call.part_shape[:2], dtype=torch.float32, device=q.device)
    plan.split(q, k, v, part, part_lse, *call.ints, *tail)
    _, hq, sq, _ = call.out_shape
    plan.combine(part, part_lse, out, lse, plan.cfg.num_splits, 0, sq, hq, *out.stride()[:3])
    return out, lse


class _Call:
    """What a call signature launches with: its plan (None: an empty output), the integer
    arguments, the scale (and causal offset) after them, the mask's element strides over
    [B, Hq, Sq, Sk] (0 along broadcast dims), the output and partials' shapes."""

    __slots__ = ("plan", "ints", "tail", "mask_strides", "out_shape", "part_shape")

    def __init__(self, plan, ints, tail, mask_strides, out_shape, part_shape):
        self.plan = plan
        self.ints = ints
        self.tail = tail
        self.mask_strides = mask_strides
        self.out_shape = out_shape
        self.part_shape = part_shape


def _prepare(q, k, v, causal_offset, scale, config, mask, aligned: bool, alibi=None) -> _Call:
    """The `_Call` of a new signature: checks the mask, finds (or builds) the launch plan."""
    batch, hq, sq, dim = q.shape
    sk = k.shape[2]
    mask_strides = ()
    kind = ""
    if mask is not None:
        mask_strides = tuple(expand_mask(mask, q, k).stride())
        kind = "bool" if mask.dtype == torch.bool else "add"
    if alibi is not None and not takes_alibi(mask, causal_offset):
        raise ValueError(
            "the decode kernels take alibi with no mask or a boolean one and a causal offset "
            ">= 0 (`takes_alibi`)"
        )
    out_shape = (batch, hq, sq, dim)
    if math.prod(out_shape) == 0:
        return _Call(None, (), (), mask_strides, out_shape, ())
    causal = causal_offset is not None
    use_tma = _use_tma(k, v)
    # A descriptor fixes K/V's shape and strides: with TMA the plan is per exact K/V layout.
    layout = (k.shape, k.stride(), v.stride()) if use_tma else None
    base = (q.shape, k.shape[:2], dim, q.dtype, q.device, causal, config, aligned,
            hw.decode_bucket(batch, sk), layout, kind, None if mask is None else mask.dtype,
            alibi is not None)  # fmt: skip
    plan = _plans.get(base)
    cfg = plan.cfg if plan is not None else (config or _default(q, k))
    sl = split_len(sk, cfg)
    ints = _ints(q, k, v, sl, cfg.num_splits, use_tma)
    tail_ints = () if causal_offset is None else (int(causal_offset),)
    # The offset is an int argument too: its bits belong in the key (it changes every token);
    # so are the mask's strides.
    alibi_ints = () if alibi is None else (alibi.stride(0),)
    bits = _spec_bits((*ints, *tail_ints, *mask_strides, *alibi_ints))
    if plan is None or plan.fixed != bits:
        key = (*base, bits)
        plan = _plans.get(key)
        if plan is None:
            plan = _Plan(q, k, v, causal, cfg, aligned, bits, use_tma, kind, alibi is not None)
            if not capturing(q):
                if len(_plans) >= _MAX_PLANS:
                    _plans.clear()
                _plans[key] = plan
                _plans[base] = plan
        else:
            _plans[base] = plan
    qk_scale = float(plan.scale if scale is None else scale) * LOG2E
    part_shape = (batch * hq * sq, cfg.num_splits, next_pow2(dim))
    return _Call(plan, ints, (qk_scale, *tail_ints), mask_strides, out_shape, part_shape)


def _default(q, k) -> hw.DecodeConfig:
    batch, hq, sq, dim = q.shape
    hkv = k.shape[1]
    return hw.default_config(dim, dtype_name(q.dtype), batch, hkv, hq // hkv, sq, k.shape[2])
