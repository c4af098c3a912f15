"""The Hopper forward family: a warp-specialised Gluon kernel (templates/attn_fwd_hopper.py.jinja).

Why a second family: a `tl.dot` kernel on sm_90 cannot overlap the softmax with the tensor-core
work. This one splits a program into a TMA producer warp and consumer warpgroups in separate
partitions (`gl.warp_specialize`), each overlapping the next QK^T with its softmax, P kept in
registers for PV, the producer's registers handed to the consumers (setmaxnreg).

When it runs (`choose`): an sm_90 GPU, a Triton whose Gluon offers what the template uses
(`gluon_api`: names moved between 3.6 and 3.9, so they are detected, not assumed), fp16/bf16,
head dim 64 or 128, 16-byte aligned q/k/v (TMA), and at least `AUTO_MIN_SEQ_Q` query rows
for the head dim and mask: where it measured faster than the portable family on the H200
(B2: geomean 0.99x cuDNN over the grid and GQA, 1k to 16k rows, with this family; 0.94x with
head dim 64 and causal 1k left to the portable one; benchmarks/RESULTS.md, "Hopper forward:
B2"); shorter causal or head-dim-64 calls were not measured and keep the portable kernel.
Every other case keeps the portable family (FLASHGEN_FWD_TMA=0 as well: this family is
TMA-only), and the reason is logged once per spec. FLASHGEN_FWD_FAMILY=portable forces the portable family;
=hopper takes this one wherever it can run, logging why where it cannot.

Configuration (`config_for`): the measured config for the head dim, mask and query-length
bucket from a Hopper configs file (FLASHGEN_HOPPER_CONFIGS or tuning_db/hopper/<gpu>.json, see
`flashgen.hardware.hopper_tiles.tuned_config`; benchmarks/hopper_tune.py writes one with the
Optuna search of `flashgen.tune.hopper_space`), else `CONFIGS` per head dim. The knobs
(`flashgen.core.hopper_config.HopperConfig`): tile sizes, ring slots, one to three consumer
warpgroups and the launch register cap, ping-pong, persistent grid, static or dynamic (programs
take the next untaken work item from a per-stream counter, `sched_counter`). The portable family's
tuning database does not hold them. An explicit portable `config` passed to
`flashgen.kernels.fwd.forward` (tuner, benchmarks) always takes the portable family.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import os

from ..core.hopper_config import HopperConfig
from ..core.spec import DENSE_KEYS, cdiv
from . import mask_ranges
from .plans import LOG2E, clamp_window, fixed_max, plan_spec, renders_fixed_max, variant_args

log = logging.getLogger("flashgen")

FAMILY_ENV = "FLASHGEN_FWD_FAMILY"
FAMILIES = ("portable", "hopper")
TEMPLATE = "attn_fwd_hopper.py.jinja"
# Exact wgmma/TMA tiles: the template does not pad the head dim.
RENDERABLE_HEAD_DIMS = (64, 128)
# Where it measured faster than the portable family (RESULTS.md): the head dims, and the fewest
# query rows per (head dim, causal) at which the family is chosen unforced (shorter: not
# measured); others need FLASHGEN_FWD_FAMILY=hopper.
AUTO_HEAD_DIMS = (64, 128)
AUTO_MIN_SEQ_Q = {(64, False): 1024, (64, True): 1024, (128, False): 0, (128, True): 1024}
# The mask kinds the Hopper family takes without being forced: each renders and compiles for
# sm_90 (tests/kernels/test_hopper.py), and is listed here once its GPU check passed and it
# measured faster than the portable family (benchmarks/RESULTS.md, "Masks (issue 16)");
# FLASHGEN_FWD_FAMILY=hopper takes every kind.
# B3 (H200, 4x16x4096, d128): float64 checks pass for all four; window, softcap and lengths
# measured faster than the portable family, mask tensors not (an additive bias was slower).
# A mask tensor is taken unforced only when it is constant along the query rows (a key-padding
# mask, [B, 1, 1, Sk]: the kernel reads one vector of keys a tile, MASK_PER_KEY) and of a kind
# in AUTO_PER_KEY_MASKS (`spec_reason`'s per_key); a full [Sq, Sk] tensor stays forced-only.
# ALiBi (session 9, B6: float64 checks pass at head dims 64 and 128; 4x16/4x4096, d128 forward
# 1.09x causal and 1.08x full against the portable family's ALiBi, "ALiBi in the Hopper family");
# combined with a window or softcap it renders and compiles but was not checked on the GPU, so
# those combinations are taken only when forced (`spec_reason`).
# Kind -> the head dims where it is taken unforced. ALiBi at head dim 64 ran slower here than in
# the portable family (session 23 B2, 4x32/8x4096 d64 bf16 forward, the two families in
# alternating processes: 1.72 against 1.34 ms full, 0.76 against 0.71 causal; under Nsight
# Compute this family's ALiBi kernel issued as busily as its plain one, 41% of issue slots, for
# 1.5x its duration), so it is taken at 128 only.
AUTO_MASKS: dict[str, frozenset[int]] = {
    "window": frozenset(RENDERABLE_HEAD_DIMS),
    "softcap": frozenset(RENDERABLE_HEAD_DIMS),
    "lengths": frozenset(RENDERABLE_HEAD_DIMS),
    "alibi": frozenset({128}),
}
# Issue 16: key-padding masks in the Hopper family unforced, so that HF's and
# nn.MultiheadAttention's key-padding masks do not run the portable forward: boolean ones on
# the H200 (B4 H16/4 4k d128, 79% of the keys visible) 0.96 ms against 1.21 for the portable
# per-key kernel, float64 checks passing (benchmarks/RESULTS.md, session 12). Additive ones
# (HF's encoders: 0 or finfo.min) since session 17: the portable forward read every key of
# them (finfo.min did not count as hidden) and ran 1.27 ms, forward+backward 0.95x SDPA; now
# `padding.key_hull` hides finfo.min padding and the family takes them as it takes boolean
# ones. (Sessions 11-12 kept them out after a GPU test of the backward on this family's
# forward gave NaN in dQ, which session 12 traced to the test's float64 reference.)
AUTO_PER_KEY_MASKS: frozenset[str] = frozenset({"bool", "add"})
# Dropout is not in AUTO_MASKS: taken only when forced (FLASHGEN_FWD_FAMILY=hopper). Its float64
# GPU test passes, but on the H200 it ran 1.9x slower than the portable family's dropout
# forward (session 22 B1, 4x16/4x4096 d128 causal: 1.074 against 0.560 ms); not profiled.
MASK_KINDS = ("window", "softcap", "lengths", "attn_mask", "alibi", "dropout")


def mask_kinds(spec) -> set[str]:
    """The mask kinds of `spec` the Hopper family has (window, softcap, lengths, attn_mask,
    alibi, dropout)."""
    return {kind for kind in MASK_KINDS if getattr(spec, kind)}


_GL_DTYPE = {"float16": "gl.float16", "bfloat16": "gl.bfloat16"}


def persistent_variant(cfg: HopperConfig) -> HopperConfig:
    """The same tiles launched as a persistent grid."""
    return cfg.with_persistent(True)


# Without a configs file for the GPU: the configs best on most of the H200 grid (RESULTS.md,
# "Hopper forward: S5G1"). Head dim 128: two consumers of 64 rows, 128-key tiles, two ring
# slots (best at 4k and 16k). Head dim 64: the same tiles with three ring slots, persistent
# (best in 5 of 6 shapes; the one-consumer config of earlier runs read 4-15% lower there).
CONFIGS = {
    64: HopperConfig(128, 128, 3, 2, 4, 168, False, True),
    128: HopperConfig(128, 128, 2, 2, 4, 168, False),
}
# Narrow windows: a band of w keys a row, walked in 128-key tiles by 64-row consumers, computes
# about w + 128 to w + 256 keys a row; 64-key tiles cut that to w + 64 to w + 128, which beats
# their lower per-key rate only while w is small. Measured on the H200 (benchmarks/RESULTS.md,
# session 17 B3; B4 H16/4 4k d128 bf16 forward): a causal 256-key window 0.111-0.114 ms with
# NARROW_CONFIGS' 128 x 64 tiles (4 or 3 ring slots) against 0.141 with 128 x 128 (1.25x); a
# 1024-key window 0.256-0.261 against 0.258 and a two-sided 512 + 512 one 0.279 against 0.270
# (no gain). So bands of at most NARROW_WINDOW keys (left + right + 1) that are narrower than
# the keys take these tiles; head dim 64 was not measured and keeps its records.
NARROW_WINDOW = 512
NARROW_CONFIGS = {128: HopperConfig(128, 64, 4, 2, 4, 168, False, True, True)}


@functools.cache
def gluon_api() -> tuple[dict | None, str | None]:
    """(names the template needs, None) when the installed Triton's Gluon has them, else
    (None, why not). Names differ by release: TMA copies are `async_copy_global_to_shared` /
    `async_copy_shared_to_global` in 3.6 and `async_load` / `async_store` in 3.9."""
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia import hopper
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    except ImportError as exc:
        return None, f"Triton has no Gluon Hopper API ({exc})"
    required = {
        gl: ("warp_specialize", "NVMMADistributedLayout", "DotOperandLayout", "NVMMASharedLayout",
             "SliceLayout", "allocate_shared_memory", "convert_layout"),
        hopper: ("warpgroup_mma", "warpgroup_mma_wait", "fence_async_shared", "mbarrier", "tma"),
    }  # fmt: skip
    missing = [name for owner, names in required.items() for name in names
               if not hasattr(owner, name)]  # fmt: skip
    if not missing:
        missing = [f"mbarrier.{n}" for n in ("init", "wait", "arrive", "expect")
                   if not hasattr(hopper.mbarrier, n)]  # fmt: skip
    if missing:
        return None, f"Gluon lacks {', '.join(missing)}"
    params = list(inspect.signature(gl.warp_specialize).parameters)
    if params[:3] != ["functions_and_args", "worker_num_warps", "worker_num_regs"]:
        return None, f"gl.warp_specialize has an unknown signature {params}"
    if not hasattr(hopper.tma, "store_wait"):
        return None, "Gluon lacks tma.store_wait"
    for load, store in (("async_load", "async_store"),
                        ("async_copy_global_to_shared", "async_copy_shared_to_global")):  # fmt: skip
        if hasattr(hopper.tma, load) and hasattr(hopper.tma, store):
            return {"tma_load": load, "tma_store": store}, None
    return None, "Gluon's tma module has no known global<->shared copy functions"


def template_context(spec) -> dict:
    """What the Hopper template may use: ints, bools and fixed names only."""
    api, reason = gluon_api()
    if api is None:
        raise RuntimeError(f"cannot render the Hopper family: {reason}")
    if (
        spec.direction != "fwd"
        or spec.head_dim not in RENDERABLE_HEAD_DIMS
        or (spec.dtype not in _GL_DTYPE)
        or (spec.alibi and spec.lengths)
    ):
        raise ValueError(f"the Hopper family has no kernel for {spec.uri()}")
    return {
        "uri": spec.uri(),
        "head_dim": spec.head_dim,
        "causal": spec.causal,
        "window": spec.window,
        "softcap": spec.softcap,
        "lengths": spec.lengths,
        "attn_mask": spec.attn_mask,
        "alibi": spec.alibi,
        "dropout": spec.dropout,
        "dtype": spec.dtype,
        "gl_dtype": _GL_DTYPE[spec.dtype],
        "dense_keys": DENSE_KEYS,
        "tma_load": api["tma_load"],
        "tma_store": api["tma_store"],
        "range_rows": mask_ranges.RANGE_ROWS,
        "tail_split": splittable(spec),
        "alibi_mma": alibi_mma(spec),
        "mask_tma": mask_tma_rendered(spec),
    }


# Issue 16: a gathered mask tensor (one varying along the query rows: T5's bias, HF's 4-D
# masks) read by the producer with TMA instead of by the consumers from global memory, where
# every masked tile waited for its loads in the softmax: gathered, HF's 4-D mask took 2.5-4.7x the
# default (portable) family's time, which itself reads dense masks at 0.41-0.53 of the
# unmasked kernel (benchmarks/RESULTS.md, sessions 31 and 37). Opt-in (FLASHGEN_MASK_TMA=1,
# read when a process first renders a spec's kernel) until its GPU checks and timings are in.
MASK_TMA_ENV = "FLASHGEN_MASK_TMA"
# the mask dtypes the TMA path reads (a boolean mask as its bytes), by torch dtype name
_MASK_TMA_GL = {"bool": "uint8", "uint8": "uint8", "bfloat16": "bfloat16", "float16": "float16",
                "float32": "float32"}  # fmt: skip


def mask_tma_rendered(spec) -> bool:
    """Whether `spec`'s rendering has the MASK_TMA path (template `mask_tma`): a mask tensor
    without lengths (with lengths the mask is a key-padding one, read as one vector of keys),
    with FLASHGEN_MASK_TMA=1. A launch asks the loaded module (`has_mask_tma`), which keeps
    what was rendered if the variable changes later in the process."""
    return bool(spec.attn_mask) and not spec.lengths and os.environ.get(MASK_TMA_ENV) == "1"


def has_mask_tma(spec) -> bool:
    """Whether `spec`'s loaded kernel takes desc_mask and MASK_TMA (its `MASK_TMA_RENDERED`)."""
    from .codegen import load_family

    if not spec.attn_mask or gluon_api()[0] is None:
        return False
    return bool(getattr(load_family(spec, "hopper"), "MASK_TMA_RENDERED", False))


def mask_tma_plan(spec, cfg: HopperConfig, mask):
    """(MASK_TMA, desc_mask's template) of a launch plan for `mask`: (None, None) where the
    kernel has no MASK_TMA, (0, None) where TMA cannot read this mask (`mask_tma_template`),
    else (its mask buffers a consumer, its template)."""
    from ..hardware.sram import current_device

    if not has_mask_tma(spec):
        return None, None
    # (the device the configs are fitted to, as `config_for` fits them: `fit_reason`)
    found = mask_tma_template(spec, cfg, mask, current_device().smem_optin_bytes)
    return found if found is not None else (0, None)


def mask_tma_template(spec, cfg: HopperConfig, mask, smem_limit: int):
    """(MASK_TMA, the descriptor template (shape, strides, block, shared layout)) the
    producer's TMA reads `mask` through: MASK_TMA the mask buffers a consumer, two where
    `smem_limit` holds them (the next tile's copy then lands while the softmax reads this one),
    else one; None where the launch keeps the gathered loads: a key-padding mask (stride 0
    along query rows), a dtype or layout TMA cannot read (the last stride 1, the others and the
    base 16-byte aligned), or a config whose shared memory, O staged in the Q buffers and one
    [M_C, BLOCK_N] mask tile a consumer, exceeds `smem_limit`. `mask`: the 4-D [B, H, Sq, Sk]
    view the kernel's strides describe (0 along broadcast dims), which the template gives size
    1 there."""
    from triton.experimental.gluon import language as gl

    dtype = str(mask.dtype).removeprefix("torch.")
    if dtype not in _MASK_TMA_GL or mask.stride(2) == 0:
        return None
    size = mask.element_size()
    b, h, sq, sk = mask.shape
    row = mask.stride(2)
    if (mask.stride(3) != 1 and sk > 1) or (row * size) % 16 or mask.data_ptr() % 16:
        return None
    shape, strides = [b, h, sq, sk], [mask.stride(0), mask.stride(1), row, 1]
    inner = row * sq  # a size-1 dim's stride: never stepped, but TMA wants a 16-byte multiple
    for d in (1, 0):
        if shape[d] == 1 or strides[d] == 0:
            shape[d], strides[d] = 1, inner
        elif (strides[d] * size) % 16:
            return None
        inner = strides[d] * shape[d]
    fits = [
        n for n in (2, 1)
        if cfg.shared_bytes(spec.head_dim, alibi=spec.alibi, alibi_mma=alibi_mma(spec),
                            mask_elem=size, mask_bufs=n) <= smem_limit
    ]  # fmt: skip
    if not fits:
        return None
    block = [1, 1, cfg.block_m // cfg.consumers, cfg.block_n]
    layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _MASK_TMA_GL[dtype]))
    return fits[0], (shape, strides, block, layout)


def mask_tma_arg(mask, tma: int):
    """desc_mask's argument: the mask (a boolean one as its bytes) where the launch reads it by
    TMA, else the mask itself as a placeholder never read."""
    import torch

    return mask.view(torch.uint8) if tma and mask.dtype == torch.bool else mask


def alibi_mma(spec) -> bool:
    """Whether the rendering adds ALiBi's per-key term on the tensor cores (one more k = 16
    product a tile: the slope in three parts against a [BLOCK_N, 16] table of key indices in
    shared memory; benchmarks/RESULTS.md, session 38 B5: 4-6% faster forward at head dim 128).
    bfloat16 only: the slope travels in the input dtype, and float16 overflows at 65504, a slope
    over sm_scale that a legal input can reach. Not with a softcap, whose ALiBi term is added to
    the capped scores, not to the products."""
    return bool(spec.alibi) and not spec.softcap and spec.dtype == "bfloat16"


def spec_reason(spec, *, forced: bool = False, per_key: bool = False) -> str | None:
    """Why `spec` cannot (or, unless forced, should not) take the Hopper family; None if it can.
    The length policy (`AUTO_MIN_SEQ_Q`) is applied by `choose`, which knows the length.
    `per_key`: the call's mask tensor is constant along the query rows (its stride 2 is 0: a
    key-padding mask, read as one vector of keys a tile), which the family takes unforced for
    the kinds in `AUTO_PER_KEY_MASKS` (boolean and additive); other mask tensors only when
    forced."""
    if spec.direction != "fwd":
        return "the Hopper family is forward only"
    if spec.alibi and spec.lengths:
        return "ALiBi with lengths (positions local to each sequence) is in the portable family"
    if spec.packed:
        return "packed sequences are in the portable family only"
    if spec.dtype not in _GL_DTYPE:
        return f"dtype {spec.dtype} (the Hopper family is fp16/bf16 only)"
    if spec.head_dim not in RENDERABLE_HEAD_DIMS:
        return f"head dim {spec.head_dim} (the Hopper family has tiles for {RENDERABLE_HEAD_DIMS})"
    if not forced and spec.head_dim not in AUTO_HEAD_DIMS:
        return f"head dim {spec.head_dim}: not measured faster than the portable family"
    if not forced and spec.alibi and (spec.window or spec.softcap):
        return "ALiBi with a window or softcap in the Hopper family: taken only when forced"
    kinds = mask_kinds(spec)
    if per_key and spec.attn_mask in AUTO_PER_KEY_MASKS:
        kinds.discard("attn_mask")  # a key-padding mask: AUTO_PER_KEY_MASKS takes it
    if forced:
        return gluon_api()[1]
    if not kinds <= AUTO_MASKS.keys():
        names = ", ".join(sorted(kinds - AUTO_MASKS.keys()))
        if spec.attn_mask and not per_key:
            names = names.replace("attn_mask", "attn_mask varying along query rows")
        return f"{names} in the Hopper family: taken only when forced (AUTO_MASKS)"
    narrow = sorted(k for k in kinds if spec.head_dim not in AUTO_MASKS[k])
    if narrow:
        return (f"{', '.join(narrow)} at head dim {spec.head_dim} in the Hopper family: taken "
                "only when forced (AUTO_MASKS)")  # fmt: skip
    return gluon_api()[1]


@functools.cache
def _device_is_sm90(index: int) -> bool:
    import torch

    return torch.cuda.get_device_capability(index) == (9, 0)


def choose(spec, q, k, v, seq_q: int, per_key: bool = False) -> bool:
    """Whether `flashgen.kernels.fwd.forward` launches the Hopper kernel for these inputs
    (`per_key`: the mask tensor, if any, has query-row stride 0; see `spec_reason`)."""
    family = os.environ.get(FAMILY_ENV, "")
    if family == "portable" or not q.is_cuda:
        return False
    forced = family == "hopper"
    if family and not forced:
        _log_once(spec, f"{FAMILY_ENV}={family!r} is not one of {FAMILIES}; using portable")
        return False
    reason = spec_reason(spec, forced=forced, per_key=per_key)
    if reason is None and os.environ.get("FLASHGEN_FWD_TMA") == "0":
        reason = "FLASHGEN_FWD_TMA=0 forces pointer loads (this family is TMA-only)"
    if reason is None and not _device_is_sm90(q.device.index or 0):
        reason = "not an sm_90 GPU"
    if reason is None and not forced and seq_q < AUTO_MIN_SEQ_Q[spec.head_dim, spec.causal]:
        return False  # not measured that short; a per-length choice, not worth a log line
    if reason is None:
        from .tma import tma_compatible

        if not all(tma_compatible(t) for t in (q, k, v)):
            reason = "q/k/v not 16-byte aligned for TMA"
    if reason is not None:
        _log_once(spec, reason)
        return False
    return True


def takes_key_hull(
    q, k, v, mask, *, causal: bool, window: bool = False, softcap: bool = False,
    dropout: bool = False, alibi: bool = False,
) -> bool:  # fmt: skip
    """Whether `flashgen.kernels.fwd.forward` would launch the Hopper kernel for this call with
    the key range of its key-padding `mask` as lengths (`flashgen.kernels.padding.key_hull`:
    the mask constant along heads and query rows), so that the key tiles past each entry's last
    visible key are skipped (`flashgen.runtime.primitives._bounds`). False for any other mask:
    on a TMA GPU, bounds with the portable family take its slower pointer-load kernels
    (benchmarks/RESULTS.md, session 10 B5). The flags as `fwd.forward` gets them (window,
    softcap, dropout, alibi given)."""
    import torch

    if mask.stride(1) != 0 or mask.stride(2) != 0:
        return False
    kind = "bool" if mask.dtype == torch.bool else "add"
    spec = plan_spec(q, "fwd", causal, window, softcap, True, kind, dropout, alibi)
    return choose(spec, q, k, v, q.shape[2], per_key=True)


@functools.cache
def _log_once(spec, reason: str) -> None:
    log.info("flashgen: %s uses the portable forward: %s", spec.uri(), reason)


# Spec extras whose kernels run without `late_wait` even where the record has it: measured on
# the H200 (benchmarks/RESULTS.md, session 30 B7; B4 H16/4 4k head dim 128 forward): softcap 30
# 1.017-1.035x faster without it, ALiBi 1.07x (causal) and 1.13x (not causal); a causal 1024
# window and a boolean key-padding mask level (0.99-1.01x), so they keep the record's.
LATE_WAIT_OFF = ("softcap", "alibi")
# Spec extras whose kernels run without ping-pong even where the record has it (head dim 128's
# 1k causal record does; its 4k non-causal record did until session 35, when the plain kernel
# read 1.025x faster without it too). Measured on the H200 (benchmarks/RESULTS.md; head dim
# 128 forward, H16 and H32/8, B4 at 4k and B16 at 1k, fwd_variants.py, alternating rounds),
# speed without ping-pong over speed with it: at 4k non-causal ALiBi 1.035-1.044x and softcap
# 50 (FIXED_MAX) 1.044x (session 34 B6/B7), the running-max softcap (cap 60) 1.03-1.04x
# (session 35 B1); at the 1k causal record ALiBi 1.03-1.04x, softcap 50 0.99-1.03x (session 35
# B1); at 4k causal, whose record has none, adding it read 0.93x for ALiBi and 0.96-0.99x for
# softcap (session 33 B5).
PINGPONG_OFF = ("softcap", "alibi")
# A record's knob -> the spec extras whose kernels run with it off (`config_for`).
KNOBS_OFF = {"late_wait": LATE_WAIT_OFF, "pingpong": PINGPONG_OFF}


def config_for(spec, seq_q: int, narrow: bool = False) -> HopperConfig:
    """The config to launch: `NARROW_CONFIGS` for a narrow window (`narrow`, see
    `narrow_window`) where the head dim has one and it fits this GPU; else the measured one for
    this head dim, mask and query-length bucket (`flashgen.hardware.hopper_tiles.tuned_config`:
    FLASHGEN_HOPPER_CONFIGS or the shipped tuning_db/hopper/<gpu>.json), else `CONFIGS`. The
    records are measured on specs without extras; `late_wait` and ping-pong are left off for
    softcapping and ALiBi, which they slowed (`KNOBS_OFF`: `LATE_WAIT_OFF`, `PINGPONG_OFF`).
    (An ALiBi rendering needs less shared memory than the config without it: its key-index
    tables take less than the O tiles it does without, so it fits wherever the config fits:
    tests/hardware, H200.)"""
    from ..hardware.hopper_tiles import fit_reason, tuned_config
    from ..hardware.sram import current_device

    device = current_device()
    cfg = NARROW_CONFIGS.get(spec.head_dim) if narrow and spec.window else None
    if (
        cfg is not None
        and fit_reason(cfg, spec.head_dim, device, alibi=spec.alibi, alibi_mma=alibi_mma(spec))
        is None
    ):
        return for_spec(cfg, spec)
    cfg = tuned_config(spec.head_dim, spec.causal, seq_q, device) or CONFIGS[spec.head_dim]
    for knob, extras in KNOBS_OFF.items():
        if getattr(cfg, knob) and any(getattr(spec, extra) for extra in extras):
            cfg = dataclasses.replace(cfg, **{knob: False})
    return for_spec(cfg, spec)


def narrow_window(window, seq_k: int) -> bool:
    """Whether a call's window (left, right), as `clamp_window` leaves it, is narrow enough for
    `NARROW_CONFIGS`: at most NARROW_WINDOW keys a row and fewer than the keys (a window as
    wide as the sequence is plain causal or full attention)."""
    if window is None:
        return False
    width = window[0] + window[1] + 1
    return width <= NARROW_WINDOW and width < seq_k


def splittable(spec) -> bool:
    """Whether the rendering can split its last round's items over their key tiles
    (TAIL_SPLIT, the config's tail_split): every item walks every key tile (no window,
    lengths, mask tensor or causality) and a chunk's partial result merges by log-sum-exp
    alone (no ALiBi, whose lse correction is per item, no dropout). Softcapping would merge
    alike but its split kernel has not run on the GPU, so it is left out too."""
    return not (banded(spec) or spec.causal or spec.alibi or spec.dropout or spec.softcap)


# The fewest key tiles a chunk of a split item takes (`tail_splits`).
MIN_CHUNK_TILES = 16


def tail_splits(spec, cfg: HopperConfig, items: int, grid: int, seq_k: int) -> int:
    """The chunks each item of the grid's last, partial round is split into (1: none).

    Without a split, a round of `items % grid` items leaves the other programs idle for a whole
    item; its items split into s chunks of the key tiles are items % grid * s units, which
    take cdiv(units, grid) rounds of cdiv(tiles, s) tiles. Split only where that is at most
    half an item's tiles, into chunks of at least MIN_CHUNK_TILES, with the largest s up to
    the config's tail_split that gives the fewest tiles. Why so cautious: every unit loads its
    Q tile again and stores its chunk in float32 (merged by a second kernel that reads it
    back), and a half-idle GPU runs its busy SMs faster, costs and savings the tile count
    leaves out. On the H200 (benchmarks/RESULTS.md, session 31 B3-B4, head dim 128): a last
    round of 4 items of 128 tiles (B1 H32/8 16k) split into 16-tile chunks ran 1.016-1.027x;
    one of 68 such items (H16 16k) 0.998-1.006x into 19 to 43-tile chunks; 4-tile chunks 0.97x
    and 1-tile chunks 0.87x (68 items of 32 and 8 tiles, 4k and 1k)."""
    rest = items % grid
    if cfg.tail_split == 1 or not cfg.persistent or not splittable(spec) or rest == 0:
        return 1
    tiles = cdiv(seq_k, cfg.block_n)
    best, best_tiles = 1, tiles
    for s in range(2, min(cfg.tail_split, tiles // MIN_CHUNK_TILES) + 1):
        cost = cdiv(rest * s, grid) * cdiv(tiles, s)
        if cost <= best_tiles:
            best, best_tiles = s, cost
    return best if 2 * best_tiles <= tiles else 1


class TailSplit:
    """The merge of a split launch (`tail_splits` > 1): the float32 chunk buffers it writes
    and the decode family's combine kernel (templates/attn_decode.py.jinja,
    attn_decode_combine: one program per row, out = sum_s 2^(lse_s - m) o_s / sum_s 2^(lse_s -
    m)) over the split items' rows, which are the flat rows [row0, B * H * Sq) of out and lse
    (the non-causal items run in (batch, head, query block) order)."""

    __slots__ = ("splits", "row0", "rows", "dim", "combine")

    def __init__(self, spec, splits: int, row0: int, rows: int, device):
        from ..core.spec import spec_for
        from .codegen import load_family
        from .launch import Launch

        self.splits, self.row0, self.rows, self.dim = splits, row0, rows, spec.head_dim
        module = load_family(spec_for(spec.head_dim, False, spec.dtype, "fwd"), "decode")
        block_s = 1 << (splits - 1).bit_length()
        self.combine = Launch(module.attn_decode_combine, (rows,), {"BLOCK_S": block_s},
                              {"num_warps": 4, "num_stages": 1}, device)  # fmt: skip

    def buffers(self, device) -> tuple:
        """Part [rows, splits, D] and PartLse [rows, splits], float32, fresh for one call."""
        import torch

        part = torch.empty((self.rows, self.splits, self.dim), dtype=torch.float32, device=device)
        return part, torch.empty((self.rows, self.splits), dtype=torch.float32, device=device)

    def merge(self, part, part_lse, out, lse) -> None:
        """Write the split rows of out (at its strides: `flashgen.kernels.layout`) and lse from
        the chunks."""
        _, heads, seq_q, _ = out.shape
        self.combine(part, part_lse, out, lse, self.splits, self.row0, seq_q, heads,
                     *out.stride()[:3])  # fmt: skip

    def launch(self, run, args: tuple, out, lse) -> None:
        """`run(*args)` (a `plan`'s launch, `call_args`' order: arguments 6 and 7 are replaced)
        with fresh chunk buffers, then the merge."""
        part, part_lse = self.buffers(out.device)
        run(*args[:6], part, part_lse, *args[8:])
        self.merge(part, part_lse, out, lse)


def tail_plan(spec, cfg: HopperConfig, q, k, device) -> TailSplit | None:
    """The `TailSplit` of `plan`'s launch for this call signature, or None when it splits
    nothing (the same `tail_splits` decision as `plan`)."""
    cfg = for_spec(cfg, spec)
    if cfg.tail_split == 1 or not cfg.persistent or not splittable(spec):
        return None  # (no grid to look up)
    batch, hq, sq, _ = q.shape
    num_m = cdiv(sq, cfg.block_m)
    items = num_m * batch * hq
    grid = _grid(cfg, items, q)
    splits = tail_splits(spec, cfg, items, grid, k.shape[2])
    if splits == 1:
        return None
    whole = items - items % grid
    row0 = (whole // num_m) * sq + (whole % num_m) * cfg.block_m
    return TailSplit(spec, splits, row0, batch * hq * sq - row0, device)


def _grid(cfg: HopperConfig, items: int, q) -> int:
    """Programs of the launch: one per item, or (persistent) at most the resident ones."""
    if not cfg.persistent:
        return items
    from ..hardware.hopper_tiles import programs_per_sm

    return min(items, programs_per_sm(cfg, q.shape[3]) * _sm_count(q.device.index or 0))


def banded(spec) -> bool:
    """Whether the rendering walks a per-consumer band of key tiles (window or lengths) or masks
    every tile (a mask tensor)."""
    return bool(spec.window or spec.lengths or spec.attn_mask)


def for_spec(cfg: HopperConfig, spec) -> HopperConfig:
    """`cfg` as the spec's kernel can run it: a banded kernel (window, lengths) has no
    ping-pong (its consumers walk different tile ranges, the turn order assumes equal ones),
    nor has a dropout one (no prefetched product: the template's `prefetch`)."""
    if (banded(spec) or spec.dropout) and cfg.pingpong:
        return dataclasses.replace(cfg, pingpong=False)
    return cfg


def forward(
    q, k, v, out, lse, *, scale: float, spec, config: HopperConfig | None = None, window=None,
    softcap=None, bounds=None, mask=None, alibi=None, dropout=None,
) -> None:  # fmt: skip
    """Launch the Hopper kernel through Gluon's JIT, writing `out` (q's dtype, any strides with
    16-byte aligned rows: through its TMA descriptor; `flashgen.kernels.layout`) and
    `lse` (float32 [B, Hq, Sq], natural log: what flashgen's backward reads). The masks as in
    `flashgen.kernels.fwd.forward` (window (left, right) with right = 0 when causal, softcap,
    bounds int32 [B, 4]; with bounds, `out` must hold zeros and `lse` +inf beforehand), each
    given exactly when `spec` has it. For the tuner and benchmarks: `flashgen.kernels.fwd`
    keeps a `plan` per call signature instead, launched directly after its first call."""
    window = clamp_window(window, spec.causal, q.shape[2], k.shape[2])
    narrow = narrow_window(window, k.shape[2])
    cfg = for_spec(config or config_for(spec, q.shape[2], narrow), spec)
    split = tail_plan(spec, cfg, q, k, None)
    per_key = mask is not None and mask.stride(2) == 0
    tma_mask, desc = mask_tma_plan(spec, cfg, mask)
    run = plan(
        spec, cfg, q, k, v, out, None, per_key=per_key, split=split, fixed=fixed_max(spec, softcap),
        mask_tma=(tma_mask, desc),
    )  # fmt: skip
    args = call_args(
        spec, q, k, v, out, lse, scale, window, softcap, bounds, mask, alibi, dropout, tma_mask
    )
    if split is None:
        run(*args)
    else:
        split.launch(run, args, out, lse)


def constexprs_of(
    spec,
    cfg: HopperConfig,
    per_key: bool = False,
    ranges: bool = False,
    tail_split: int = 1,
    fixed: bool = False,
    tma_mask: int | None = None,
) -> dict:
    """The kernel's constexpr arguments for `cfg` (what the launch and the ahead-of-time
    compile pass alike), in the kernel's order; `tail_split`: TAIL_SPLIT as the launch's
    `tail_plan` gives it (its `splits`); `fixed`: FIXED_MAX (`fixed_max` of the call), which
    a rendering that can drop the running max takes; `tma_mask`: MASK_TMA (the mask buffers a
    consumer, 0: gathered loads), None for a rendering without it (`has_mask_tma`)."""
    masks: dict[str, bool | int] = (
        {"MASK_PER_KEY": bool(per_key), "MASK_RANGES": bool(ranges)} if spec.attn_mask else {}
    )
    if tma_mask is not None:
        masks["MASK_TMA"] = int(tma_mask)
    if renders_fixed_max(spec):
        masks["FIXED_MAX"] = bool(fixed)
    elif fixed:
        raise ValueError(f"{spec.uri()}: FIXED_MAX needs a softcap without ALiBi or a bias")
    return {
        "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "NUM_BUF": cfg.num_buf,
        "NUM_CONSUMERS": cfg.consumers, "PINGPONG": cfg.pingpong, "DYNAMIC": cfg.dynamic,
        "LATE_WAIT": cfg.late_wait, "TAIL_SPLIT": tail_split, **masks,
        "num_warps": cfg.num_warps,
    }  # fmt: skip


def plan(
    spec,
    cfg: HopperConfig,
    q,
    k,
    v,
    out,
    device,
    per_key: bool = False,
    ranges: bool = False,
    split: TailSplit | None = None,
    fixed: bool = False,
    mask_tma=(None, None),
):
    """The `flashgen.kernels.launch.Launch` of the Hopper kernel for one call signature (the
    shapes and strides of q, k, v and out, the config): grid, constexprs and the four descriptor templates
    (q, k, v, out with their shared layouts), fixed once. `device`: as `Launch` takes it
    (`direct_device`; None launches through the JIT every time). `per_key` (a spec with a mask
    tensor): the mask's query-row stride is 0, passed as the constexpr MASK_PER_KEY (one vector
    of keys a tile instead of a gathered tile). `ranges` (a boolean mask tensor without
    lengths): MASK_RANGES, the launch then takes `range_args` of the mask last. Called with
    `call_args`. `split` (`tail_plan`'s, for the same signature and config): the launch splits
    the last round's items (TAIL_SPLIT) and must be run through `split.launch` (its buffers in
    place of call_args' placeholders, then its merge); without it nothing is split whatever
    the config says. `fixed`: the call's `fixed_max` (FIXED_MAX), the same for every call that
    shares the plan. `mask_tma`: `mask_tma_plan`'s (MASK_TMA, template): in a rendering with
    MASK_TMA, its mask buffers a consumer and desc_mask's template, or (0, None) for the
    gathered loads; `call_args` then ends with `mask_tma_arg`."""
    from triton.experimental.gluon import language as gl

    from .codegen import load_family
    from .launch import Launch

    batch, hq, sq, dim = q.shape
    cfg = for_spec(cfg, spec)
    rows_q = cfg.block_m // cfg.consumers
    items = cdiv(sq, cfg.block_m) * batch * hq
    grid = _grid(cfg, items, q)
    gl_dtype = getattr(gl, spec.dtype)

    def template(t, rows):
        layout = gl.NVMMASharedLayout.get_default_for([1, 1, rows, dim], gl_dtype)
        return list(t.shape), list(t.stride()), [1, 1, rows, dim], layout

    descs: tuple = ((0, template(q, rows_q)), (1, template(k, cfg.block_n)),
                    (2, template(v, cfg.block_n)), (3, template(out, rows_q)))  # fmt: skip
    module = load_family(spec, "hopper")
    tma_mask, mask_desc = mask_tma
    if (tma_mask is not None) != bool(getattr(module, "MASK_TMA_RENDERED", False)):
        raise ValueError(f"{spec.uri()}: MASK_TMA {tma_mask} for a kernel rendered "
                         f"{'without' if tma_mask is not None else 'with'} it")  # fmt: skip
    if tma_mask:
        descs = (*descs, (module.attn_fwd_ws.arg_names.index("desc_mask"), mask_desc))
    constexprs = constexprs_of(
        spec, cfg, per_key, ranges, split.splits if split else 1, fixed, tma_mask
    )
    kernel = module.attn_fwd_ws
    return Launch(kernel, (grid,), constexprs, {"maxnreg": cfg.maxnreg}, device, descs)


def sizes(q, k) -> tuple[int, int, int, int, int]:
    """The kernel's BATCH, H, GROUP, SEQ_Q, SEQ_K for q [B, Hq, Sq, D] and k [B, Hkv, Sk, D]:
    fixed by a plan's call signature (`flashgen.kernels.fwd` keeps them in the plan)."""
    batch, hq, sq, _ = q.shape
    return batch, hq, hq // k.shape[1], sq, k.shape[2]


def call_args(
    spec, q, k, v, out, lse, scale, window, softcap, bounds, mask, alibi=None, dropout=None,
    tma_mask=None,
) -> tuple:  # fmt: skip
    """The positional arguments of a `plan`'s launch, in the template's order (q, k, v and out
    as tensors: the launch makes their descriptors; lse stands in for the split chunks'
    buffers, which `forward` replaces where the launch splits), the masks checked against `spec`;
    `window` as `flashgen.kernels.plans.clamp_window` gives it; `tma_mask`: the plan's
    MASK_TMA in a rendering with it (desc_mask last: `mask_tma_arg`), else None."""
    return (
        q, k, v, out, lse, sched_counter(q.device), lse, lse, *sizes(q, k), float(scale) * LOG2E,
        *mask_args(spec, scale, window, softcap, bounds, mask, alibi, dropout),
        *(range_args(mask, False) if spec.attn_mask else ()),
        *(() if tma_mask is None else (mask_tma_arg(mask, tma_mask),)),
    )  # fmt: skip


def range_args(mask, ranges: bool) -> tuple:
    """The last three arguments of a rendering with a mask tensor: the mask's key ranges
    (`flashgen.kernels.mask_ranges.key_ranges`) when the launch has MASK_RANGES, else the
    mask itself as a placeholder that is never read and zero strides (nothing built per call,
    as the portable kernels' block-sparse placeholders)."""
    return mask_ranges.key_ranges(mask) if ranges else (mask, 0, 0)


def mask_args(
    spec, scale: float, window, softcap, bounds, mask=None, alibi=None, dropout=None
) -> tuple:
    """The kernel's mask arguments after qk_scale, in the template's order (the portable
    kernels', `flashgen.kernels.plans.variant_args`); a mask the spec
    has must be given and one it lacks must not (a mismatch would launch the wrong kernel).
    `alibi`: the slopes, float32 [B, Hq] with the last stride 1 (batch stride 0 when shared);
    `dropout`: (p, seed)."""
    given = {"window": window, "softcap": softcap, "lengths": bounds, "attn_mask": mask,
             "alibi": alibi, "dropout": dropout}  # fmt: skip
    for name, value in given.items():
        if bool(getattr(spec, name)) != (value is not None):
            raise ValueError(
                f"{spec.uri()}: {name} {'missing' if value is None else 'not expected'}"
            )
    return variant_args(float(scale), window, softcap, bounds, mask, dropout, alibi)


def sched_counter(device):
    """The int32 work-item counter of a dynamic persistent launch (the template's Sched) for
    the current stream of `device`: zero between launches (the kernel resets it), so one per
    stream serves every launch in that stream's order; two streams must not share one. Keyed
    by the raw stream handle (what the launch itself reads; cheaper than a Stream object): a
    handle reused after its stream is gone may share a counter, never concurrently. Made by
    `lasting.lasting`: a counter kept from a CUDA-graph pool breaks Inductor's CUDA-graph trees."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    return stream_counter(device, torch._C._cuda_getCurrentRawStream(index), index)


def stream_counter(device, stream: int, index: int | None = None):
    """`sched_counter(device)` for the stream whose raw handle is `stream` (`index`: the
    device's index, default `device.index`): one dict lookup on a hit, for a caller that holds
    the handle already (`flashgen.kernels.flat`)."""
    key = (device.index if index is None else index, stream)
    counter = _COUNTERS.get(key)
    if counter is None:
        import torch

        from .lasting import lasting

        make = functools.partial(torch.zeros, 1, dtype=torch.int32, device=device)
        counter = _COUNTERS[key] = lasting(make, device)
    return counter


_COUNTERS: dict = {}


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count
