"""Shared-memory (SRAM) budget model and GPU limits: decide, without compiling, whether a config fits.

Why a model: a config whose shared memory exceeds the device's opt-in limit fails at launch with
OutOfResources after a 1-3 s compile. The tuner must never pay that, and the space must be
plannable for a GPU we do not have. The model mirrors what Triton allocates for the generated
kernels, checked against the real compiler (benchmarks/sram_vs_compiler.py, tests/hardware/test_sram.py):

- Loads inside the key loop (forward: K and V; backward dK/dV kernel: Q and dO; dQ kernel: K and
  V) are software-pipelined through shared memory. Hopper's wgmma path (mma v3: sm_90, a multiple
  of 4 warps, at least 64 rows per dot) keeps `num_stages` buffers; the Ampere path (mma v2, also
  Hopper with 2 warps or fewer rows) keeps `num_stages - 1`. With one stage nothing is pipelined:
  the forward stages one K-or-V tile, the backward kernels both of their loop tiles, and dK/dV on
  mma v2 a conversion buffer of 16 B x D per warp.
- Loop-invariant dot operands (Q in the forward, K/V or Q/dO in the backward) stay resident.
- mma v2 reuses the first product's register layout for P only when the warps tile the rows
  (rows >= block_d); otherwise P is staged through shared memory for the second product.
- Small terms: barriers and row-statistics scratch (1 KB + 4 B per row), and the dK/dV kernel's
  per-step lse/delta vectors.
- Hopper's TMA kernels (forward, and the backward for 16-bit dtypes) allocate the same as the
  pointer kernels within the small terms; flashgen may launch either, so both are budgeted.
- Triton 3.6 (the H200 machine's) and 3.9 (CI's) allocate the same for the current templates
  (benchmarks/SRAM.md). An earlier forward template cost 3.6 another 4 KB per warp (pointer
  tensors carried from one loop into the next changed layout through shared memory); the
  template now builds fresh pointers. The comparison script is the guard against such drift.
- sm_75 (T4) is modelled as the Ampere path; its compiler stages less (no cp.async), so the
  model is conservative there. float32 (ieee dots) uses the same formulas with 4-byte tiles.

Everything here is pure and cheap except `current_device()`, which reads the CUDA device once.
Public interface (the cross-room contract): DeviceLimits, KNOWN_GPUS, current_device,
device_slug, smem_bytes, reg_estimate, fits.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, replace

from ..core.config import TileConfig
from ..core.spec import KernelSpec
from .dq_tiles import dq_config

# Hopper-family capabilities whose compiler path uses wgmma (mma v3).
_MMA_V3_MAJOR = 9
_TMA_MAJOR = 9
ELEM_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
MAX_REGS_PER_THREAD = 255
PLANNING_TARGET = "nvidia-h200"


@dataclass(frozen=True)
class DeviceLimits:
    """What bounds a kernel launch on one GPU model.

    smem_optin_bytes is the per-block maximum a kernel may opt into
    (cudaDevAttrMaxSharedMemoryPerBlockOptin), NOT the 48 KB default `shared_memory_per_block`.
    """

    name: str
    capability: tuple[int, int]
    sm_count: int
    smem_optin_bytes: int
    regs_per_sm: int = 65536
    max_regs_per_thread: int = MAX_REGS_PER_THREAD

    @property
    def capability_str(self) -> str:
        return f"{self.capability[0]}.{self.capability[1]}"


def _gpu(name, cap, sms, smem) -> DeviceLimits:
    return DeviceLimits(name, cap, sms, smem, 65536, MAX_REGS_PER_THREAD)


# Opt-in shared memory per block from the CUDA programming guide (per compute capability):
# 7.5: 64 KB; 8.0: 163 KB; 8.6/8.9: 99 KB; 9.0: 227 KB. The H200 value was read on the device.
KNOWN_GPUS: dict[str, DeviceLimits] = {
    "nvidia-h200": _gpu("NVIDIA H200", (9, 0), 132, 232_448),
    "nvidia-h100": _gpu("NVIDIA H100 80GB HBM3", (9, 0), 132, 232_448),
    "nvidia-a100": _gpu("NVIDIA A100-SXM4-80GB", (8, 0), 108, 166_912),
    "nvidia-a10": _gpu("NVIDIA A10", (8, 6), 72, 101_376),
    "nvidia-rtx-3090": _gpu("NVIDIA GeForce RTX 3090", (8, 6), 82, 101_376),
    "nvidia-l4": _gpu("NVIDIA L4", (8, 9), 58, 101_376),
    "nvidia-l40": _gpu("NVIDIA L40", (8, 9), 142, 101_376),
    "nvidia-l40s": _gpu("NVIDIA L40S", (8, 9), 142, 101_376),
    "nvidia-rtx-4090": _gpu("NVIDIA GeForce RTX 4090", (8, 9), 128, 101_376),
    "nvidia-t4": _gpu("Tesla T4", (7, 5), 40, 65_536),
}

# Tokens in a CUDA device name that identify a known model (names vary by board and memory:
# "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "Tesla T4", "NVIDIA GeForce RTX 4090").
_NAME_TOKENS = {
    "h200": "nvidia-h200",
    "h100": "nvidia-h100",
    "a100": "nvidia-a100",
    "a10": "nvidia-a10",
    "3090": "nvidia-rtx-3090",
    "l4": "nvidia-l4",
    "l40": "nvidia-l40",
    "l40s": "nvidia-l40s",
    "4090": "nvidia-rtx-4090",
    "t4": "nvidia-t4",
}


def _slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown-gpu"


def device_slug(device: DeviceLimits) -> str:
    """Stable short name: the KNOWN_GPUS key when the device name identifies one, else the
    slugified name (so "NVIDIA A100-SXM4-40GB" and "NVIDIA A100 80GB PCIe" both give
    "nvidia-a100")."""
    tokens = re.split(r"[^a-z0-9]+", device.name.lower())
    for token in tokens:
        slug = _NAME_TOKENS.get(token)
        if slug is not None:
            return slug
    return _slugify(device.name)


@functools.lru_cache(maxsize=1)
def _cuda_device() -> DeviceLimits | None:
    """The current CUDA device's limits, read once per process (None without CUDA)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return DeviceLimits(
        name=props.name,
        capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        # Never `shared_memory_per_block`: that is the 48 KB default, not what a kernel may use.
        smem_optin_bytes=int(props.shared_memory_per_block_optin),  # type: ignore[attr-defined]
        regs_per_sm=int(getattr(props, "regs_per_multiprocessor", 65536)),
        max_regs_per_thread=MAX_REGS_PER_THREAD,
    )


def current_device() -> DeviceLimits:
    """The device to plan for.

    Order: FLASHGEN_GPU=<slug> (a KNOWN_GPUS key) overrides everything; else the CUDA device;
    else (no CUDA: CPU development, CI) the H200 entry as planning target. FLASHGEN_SMEM_BYTES=<n>
    then replaces the shared-memory limit (for a GPU the table does not know, or to plan for a
    smaller budget).
    """
    slug = os.environ.get("FLASHGEN_GPU", "").strip()
    if slug:
        if slug not in KNOWN_GPUS:
            raise ValueError(
                f"FLASHGEN_GPU={slug!r} is not a known GPU; known: {', '.join(sorted(KNOWN_GPUS))}"
            )
        device = KNOWN_GPUS[slug]
    else:
        device = _cuda_device() or KNOWN_GPUS[PLANNING_TARGET]
    smem = os.environ.get("FLASHGEN_SMEM_BYTES", "").strip()
    if smem:
        try:
            value = int(smem)
        except ValueError as exc:
            raise ValueError(f"FLASHGEN_SMEM_BYTES must be an integer, got {smem!r}") from exc
        if value <= 0:
            raise ValueError(f"FLASHGEN_SMEM_BYTES must be positive, got {value}")
        device = replace(device, smem_optin_bytes=value)
    return device


def _uses_mma_v3(capability: tuple[int, int], rows: int, num_warps: int) -> bool:
    """Whether Triton lowers a dot with `rows` output rows to Hopper wgmma (seen on sm_90:
    4 or 8 warps and >= 64 rows; 2 warps or fewer rows fall back to the Ampere mma path)."""
    return capability[0] == _MMA_V3_MAJOR and num_warps % 4 == 0 and rows >= 64


def _pipelined(stage_bytes: int, one_tile: int, stages: int, v3: bool) -> int:
    """Bytes of the loop operands' buffers: see the module docstring."""
    if stages <= 1:
        return one_tile
    return stage_bytes * (stages if v3 else stages - 1)


@dataclass(frozen=True)
class _LoopKernel:
    """The shape every flashgen kernel has: `resident` [rows, D] tiles loaded once; a loop whose
    step loads `loop_tiles` [loop_rows, D] tiles (and `loop_vectors` fp32 vectors of loop_rows);
    chained products through a [rows, loop_rows] intermediate; `unpipelined` of the loop tiles
    live at once when nothing is pipelined (1 when the second tile reuses the first's buffer)."""

    name: str
    rows: int
    loop_rows: int
    resident: int
    loop_tiles: int
    unpipelined: int
    loop_vectors: int
    single_stage_scratch: bool = False
    dq_partial: bool = False  # the one-pass backward: an fp32 [rows of Q, D] dQ tile per step
    dq_cfg: TileConfig | None = None  # the split dQ kernel's own warps/stages, when it has them
    # Bytes per element of an attention-mask tensor's [rows, loop_rows] tile read each step
    # (0: none). The split backward loads it with tl.load, which the compiler pipelines like
    # the loop's tiles: seen on the H200 (triton 3.6), a bool mask at d128 (64, 128, 8, 3)
    # took 246,784 B where the tiles alone model 231,168 B, so launch failed with the
    # estimate inside the limit. A bool mask is 1 byte; an additive one is counted at 4 (an
    # fp32 bias is allowed with 16-bit inputs; the spec does not carry the mask's dtype).
    mask_elem: int = 0
    # (Dropout's draw, keep_tile in flashgen/kernels/dropout_ref.py, is a hash per score in
    # registers: compiled ahead of time for sm_90, triton 3.6 and 3.9, d128 bf16, a dropout
    # kernel takes the same bytes as the plain one at every config tried. The Philox draw it
    # replaced reshaped its words through shared memory and was counted here.)


_MASK_ELEM = {"bool": 1, "add": 4}


def _kernels(
    spec: KernelSpec, cfg: TileConfig, capability: tuple[int, int], kind: str = "split"
) -> tuple[_LoopKernel, ...]:
    bm, bn = cfg.block_m, cfg.block_n
    if spec.direction == "bwd" and kind == "onepass":
        # The dK/dV kernel's shape plus a dQ partial per step (see _loop_kernel_bytes).
        onepass = (_LoopKernel("attn_bwd_onepass", bn, bm, 2, 2, 2, 2, True, True),)
        if capability[0] < _TMA_MAJOR or spec.dtype == "float32":
            return onepass
        return onepass + (_LoopKernel("attn_bwd_onepass_tma", bn, bm, 2, 2, 2, 2, True, True),)
    if spec.direction == "fwd":
        # Q resident; K then V per key step (V may take K's buffer when not pipelined).
        pointer = _LoopKernel("attn_fwd", bm, bn, 1, 2, 1, 0)
        if capability[0] < _TMA_MAJOR:
            return (pointer,)
        # Hopper runs the TMA kernel when the tensors allow it and falls back to the pointer
        # kernel otherwise, so both must fit. The TMA kernel's barriers (8 B to 1 KB) are inside
        # the scratch term.
        return (pointer, _LoopKernel("attn_fwd_tma", bm, bn, 1, 2, 1, 0))
    # dK/dV keeps K, V ([block_n, D]) and walks Q, dO (+ lse, delta) per query block;
    # dQ keeps Q, dO and walks K, V, on its own config where one was measured
    # (flashgen.hardware.dq_tiles, as flashgen.kernels.bwd runs it for records and defaults).
    # fits() budgets the larger.
    dq = dq_config(spec, cfg, capability)
    qm, qn = dq.block_m, dq.block_n
    me = _MASK_ELEM.get(spec.attn_mask, 0)
    # (ALiBi, spec.alibi, adds one slope and a register-tile add per score: no shared memory)
    # A spec without extras also has the dQ kernel that computes delta itself (one [BLOCK_M, D]
    # load of O before the walk): the plain dQ kernel's buffers.
    dq_names = ("attn_bwd_dq",) if spec.has_extras else ("attn_bwd_dq", "attn_bwd_dq_delta")
    kernels = (
        _LoopKernel("attn_bwd_dkdv", bn, bm, 2, 2, 2, 2, True, mask_elem=me),
        *(_LoopKernel(name, qm, qn, 2, 2, 2, 0, dq_cfg=dq, mask_elem=me) for name in dq_names),
    )
    if capability[0] < _TMA_MAJOR or spec.dtype == "float32":
        return kernels
    # Hopper, 16-bit: flashgen.kernels.bwd runs the TMA builds when the tensors allow it.
    return kernels + (
        _LoopKernel("attn_bwd_dkdv_tma", bn, bm, 2, 2, 2, 2, True, mask_elem=me),
        *(
            _LoopKernel(f"{name}_tma", qm, qn, 2, 2, 2, 0, dq_cfg=dq, mask_elem=me)
            for name in dq_names
        ),
    )


def _loop_kernel_bytes(
    k: _LoopKernel,
    capability: tuple[int, int],
    block_d: int,
    elem: int,
    cfg: TileConfig,
) -> int:
    v3 = _uses_mma_v3(capability, k.rows, cfg.num_warps)
    tile = k.loop_rows * block_d * elem
    loop = _pipelined(k.loop_tiles * tile, k.unpipelined * tile, cfg.num_stages, v3)
    # The per-row fp32 vectors loaded each step (lse, delta) are buffered too, up to one copy
    # per stage (seen 128 B to 8 KB: the dK/dV TMA build at block_m 256, 4 stages).
    vectors = k.loop_vectors * k.loop_rows * 4 * cfg.num_stages
    resident = k.resident * k.rows * block_d * elem
    mask_tile = k.rows * k.loop_rows * k.mask_elem
    loop += _pipelined(mask_tile, mask_tile, cfg.num_stages, v3)
    staged_p = 0 if v3 or k.rows >= block_d else k.rows * k.loop_rows * elem
    if k.single_stage_scratch and cfg.num_stages <= 1 and not v3:
        # dK/dV without pipelining, mma v2: its loop tiles convert through a buffer of
        # 16 B x D per warp (sm_80 and sm_90, head dims 64-256, 4 and 8 warps; covers P too).
        staged_p = max(staged_p, 16 * block_d * cfg.num_warps)
    # Barriers and layout-conversion scratch for row statistics (seen: 8 B to 2 KB).
    scratch = 1024 + 4 * (k.rows + k.loop_rows)
    return (
        loop
        + vectors
        + resident
        + staged_p
        + scratch
        + _dq_partial_bytes(k, capability, block_d, elem, cfg)
    )


def _dq_partial_bytes(k: _LoopKernel, capability, block_d: int, elem: int, cfg: TileConfig) -> int:
    """The one-pass backward's dQ partial ([block_m, D] fp32, from a product with block_m rows)
    goes to the atomics through shared memory when the loop is pipelined. On the wgmma path the
    whole tile (block_m x D x 4 bytes) or, when smaller, 64 x D bytes per warp (seen on sm_90
    with triton 3.6, head dims 64/128: (64,64,4,2) 16 KB at d64, (128,64,4,2) 32 KB and
    (128,128,8,2) 64 KB at d128; the whole tile when the dK/dV products are on mma v2, seen
    at (256,32,8,3) d64); on the mma v2 path (fewer than 64 rows or 4 warps)
    3 x block_m x D x elem (block_m 32). Unpipelined, buffers are shared and nothing is added
    (seen at 1 stage). The one-pass kind runs head dims <= 128 only (flashgen.kernels.bwd)."""
    if not k.dq_partial or cfg.num_stages <= 1:
        return 0
    if not _uses_mma_v3(capability, k.loop_rows, cfg.num_warps):
        return 3 * k.loop_rows * block_d * elem
    whole = k.loop_rows * block_d * 4
    if not _uses_mma_v3(capability, k.rows, cfg.num_warps):
        return whole  # dK/dV products on mma v2 (block_n < 64): the whole tile (block_m 256)
    return min(whole, cfg.num_warps * 64 * block_d)


def kernel_bytes(
    spec: KernelSpec,
    cfg: TileConfig,
    capability: tuple[int, int],
    kind: str = "split",
) -> dict[str, int]:
    """Estimated shared bytes per generated kernel (the comparison script checks each one).
    `kind`: for backward specs, the backward kind whose kernels to count ("split": dK/dV and
    dQ kernels; "onepass": the one-pass kernel, flashgen.kernels.bwd)."""
    elem = ELEM_BYTES[spec.dtype]
    return {
        k.name: _loop_kernel_bytes(k, capability, spec.block_d, elem, k.dq_cfg or cfg)
        for k in _kernels(spec, cfg, capability, kind)
    }


# Representative capabilities of the compiler paths, for `capability=None` (worst case).
_PLANNING_CAPABILITIES = ((9, 0), (8, 0))


def smem_bytes(
    spec: KernelSpec,
    cfg: TileConfig,
    capability: tuple[int, int] | None = None,
    kind: str = "split",
) -> int:
    """Estimated shared-memory bytes of the kernel(s) for (spec, cfg) on `capability`.

    capability=None gives the largest over the compiler paths (Hopper wgmma and Ampere mma), so a
    config within that budget fits on any GPU with that much opt-in shared memory.
    """
    caps = _PLANNING_CAPABILITIES if capability is None else ((capability[0], capability[1]),)
    return max(max(kernel_bytes(spec, cfg, cap, kind).values()) for cap in caps)


def reg_estimate(spec: KernelSpec, cfg: TileConfig) -> int:
    """Approximate 32-bit registers per thread: fp32 accumulators and the score tile spread over
    the block's threads, plus a fixed allowance for addresses and loop state. Used to keep
    hopeless spillers out of the space, not to decide launch failure (the compiler spills instead
    of failing, and at most 255 registers x 256 threads always fit one SM)."""
    threads = 32 * cfg.num_warps
    d = spec.block_d
    if spec.direction == "fwd":
        fp32_values = cfg.block_m * d + cfg.block_m * cfg.block_n
    else:
        # dK/dV kernel: dK and dV accumulators plus the scores and their gradient.
        dkdv = 2 * cfg.block_n * d + 2 * cfg.block_n * cfg.block_m
        dq = cfg.block_m * d + 2 * cfg.block_m * cfg.block_n
        fp32_values = max(dkdv, dq)
    return fp32_values // threads + 32


def fits(
    spec: KernelSpec,
    cfg: TileConfig,
    device: DeviceLimits,
    kind: str = "split",
) -> bool:
    """True when the model says (spec, cfg) launches within `device`'s shared-memory limit
    (`kind`: the backward kind, as in `kernel_bytes`)."""
    return smem_bytes(spec, cfg, device.capability, kind) <= device.smem_optin_bytes
