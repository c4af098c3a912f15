"""Analytical run-time estimate of one attention kernel launch, for tuning without a GPU.

On a machine without a GPU the tuner cannot time candidates, but it still has to rank them for a
planning target (the H200 by default). This model gives a roofline-style estimate in
milliseconds for (spec, config, shape, device). It is deliberately simple and deterministic: it
only has to order configs sensibly, and every record it produces is marked *modelled* so a later
measurement on the real GPU always replaces it.

What it accounts for, because each of these changed the best config in the H200 grid
(benchmarks/RESULTS.md):
- tile work: the two (forward) or five (backward) matrix products per tile on the tensor cores,
  the exponentials of the online softmax on the special-function units, and the bytes of the
  K/V (or Q/dO) tiles streamed per inner step;
- masking waste: a ragged last block still computes a full tile, and causal tiles on and below
  the diagonal are computed in full, while tiles above it are skipped;
- occupancy: resident programs per SM from shared memory, registers and the warp limit
  (flashgen.hardware.sram gives the per-config byte and register estimates);
- wave quantisation over the SMs and the tail of the longest program (causal);
- software pipelining: with more stages the loads overlap the math;
- warps: too few rows per warp starve the MMA units, a second warpgroup costs synchronisation,
  and register spills cost time.

Calibration: the constants below (L2 bandwidth multiple, exponential rate, warpgroup term) were
fitted on the H200 (2026-11) to the measured times
of 20 config grids (benchmarks/raw: the 8 tuner_vs_grid cases and the 12 forward shapes of
gpu_check), minimising the regret of the model's top-1/3/8 picks. Before: the measured best was
among the model's top 8 in 9 of 20 grids (its favourite up to 38% slower than the best); after:
in all 20 (favourite at most 14% slower). The model is still analytical and the same for every
shape and GPU; only its rates were set from data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.spec import cdiv
from .sram import ELEM_BYTES

# Dense 16-bit tensor-core TFLOP/s (fp32 accumulate) and HBM GB/s of the known planning targets.
# Keyed by flashgen.hardware.sram slug; an unknown GPU falls back to a per-SM rate by architecture.
_PEAKS: dict[str, tuple[float, float]] = {
    "nvidia-h200": (989.0, 4800.0),
    "nvidia-h100": (989.0, 3350.0),
    "nvidia-a100": (312.0, 2039.0),
    "nvidia-l40": (181.0, 864.0),
    "nvidia-l4": (121.0, 300.0),
    "nvidia-rtx-4090": (165.0, 1008.0),
    "nvidia-t4": (65.0, 320.0),
}
# Per-SM tensor TFLOP/s and per-SM HBM GB/s by compute capability major, for unknown GPUs.
_PER_SM_FALLBACK = {7: (1.6, 8.0), 8: (2.9, 19.0), 9: (7.5, 30.0), 10: (15.0, 40.0)}
# Exponentials per second relative to the tensor rate (the FA3 paper's H100 figures: 3.9 TFLOP/s
# of exp against 989 of matmul); the same ratio is assumed elsewhere.
_EXP_RATIO = 0.5 * 3.9 / 989.0
# L2 serves the K/V tiles that neighbouring query blocks share: a multiple of HBM bandwidth.
_L2_OVER_HBM = 6.0
# Pipeline depth beyond which deeper software pipelining hides no more load latency.
_USEFUL_STAGES = 3
# Launch latency of one kernel, in seconds.
_LAUNCH_S = 4.0e-6
# Programs of more than one warpgroup (8 warps) synchronise their warpgroups every step.
_MULTI_WARPGROUP_COST = 0.1


@dataclass(frozen=True)
class Shape:
    """One attention problem: batch, query heads, kv heads, query and key lengths."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int


@dataclass(frozen=True)
class Rates:
    """Per-SM throughputs of the target, in units per second."""

    tensor_flops: float
    exp_per_s: float
    l2_bytes: float
    hbm_bytes_total: float


def device_rates(device, dtype: str) -> Rates:
    """Throughputs of `device` (a flashgen.hardware.sram.DeviceLimits) for inputs of `dtype`."""
    from .sram import device_slug

    sms = max(int(device.sm_count), 1)
    slug = device_slug(device)
    if slug in _PEAKS:
        tflops, gbps = _PEAKS[slug]
        per_sm_tensor = tflops * 1e12 / sms
        hbm_total = gbps * 1e9
    else:
        per_sm_t, per_sm_bw = _PER_SM_FALLBACK.get(int(device.capability[0]), (2.0, 15.0))
        per_sm_tensor = per_sm_t * 1e12
        hbm_total = per_sm_bw * 1e9 * sms
    if dtype == "float32":
        # IEEE fp32 dots run on the CUDA cores: roughly an eighth of the 16-bit tensor rate.
        per_sm_tensor /= 8.0
    return Rates(
        tensor_flops=per_sm_tensor,
        exp_per_s=per_sm_tensor * _EXP_RATIO,
        l2_bytes=_L2_OVER_HBM * hbm_total / sms,
        hbm_bytes_total=hbm_total,
    )


def programs_per_sm(spec, cfg, device) -> int:
    """How many programs of this config an SM holds at once (0: it does not fit at all)."""
    from .sram import reg_estimate, smem_bytes

    smem = max(int(smem_bytes(spec, cfg)), 1)
    if smem > device.smem_optin_bytes:
        return 0
    by_smem = (device.smem_optin_bytes + 1024) // smem
    regs_per_thread = min(max(int(reg_estimate(spec, cfg)), 16), device.max_regs_per_thread)
    by_regs = device.regs_per_sm // (regs_per_thread * 32 * cfg.num_warps)
    max_warps = 32 if device.capability[0] < 8 else 64
    by_warps = max_warps // cfg.num_warps
    return max(0, min(by_smem, by_regs, by_warps, 32))


def _mma_efficiency(spec, cfg, device, rows: int) -> float:
    """Fraction of the tensor peak a tile of `rows` x block reaches with cfg's warps."""
    eff = 1.0
    rows_per_warp = rows / cfg.num_warps
    if rows_per_warp < 16:
        eff *= rows_per_warp / 16.0
    if device.capability[0] >= 9 and (rows < 64 or cfg.num_warps % 4):
        # Hopper's warpgroup MMA needs 64-row tiles per 4 warps; below that Triton falls back to
        # the older per-warp MMA at well under half the rate.
        eff *= 0.45
    small = min(cfg.block_m, cfg.block_n)
    if small < 32:
        eff *= 0.6
    elif small < 64:
        eff *= 0.85
    from .sram import reg_estimate

    regs = int(reg_estimate(spec, cfg))
    if cfg.num_warps > 4 and device.capability[0] >= 9:
        eff /= 1.0 + _MULTI_WARPGROUP_COST
    if regs > device.max_regs_per_thread:
        eff /= 1.0 + 3.0 * (regs - device.max_regs_per_thread) / device.max_regs_per_thread
    return eff


def _step_time(math_s: float, load_s: float, stages: int, resident: int) -> float:
    """One inner step: loads overlap the math with software pipelining or other programs.

    Two loads in flight already cover the load latency, so pipelining deeper than 3 stages hides
    nothing more (it only costs shared memory, hence occupancy, and a longer prologue); other
    resident programs hide it as well as the program's own pipeline (fitted: no discount)."""
    overlap_depth = min(max(stages - 1, 0), _USEFUL_STAGES - 1) + max(resident - 1, 0)
    hidden = 1.0 - 1.0 / (1.0 + overlap_depth)
    return max(math_s, load_s) + min(math_s, load_s) * (1.0 - hidden)


def _visible_cols(row_end: int, seq_k: int, causal: bool) -> int:
    """Keys that rows [.., row_end) can see."""
    return min(seq_k, row_end) if causal else seq_k


def _forward_programs(spec, cfg, shape: Shape) -> list[tuple[int, int]]:
    """(inner steps, count) per distinct program of the forward grid."""
    m_blocks = cdiv(shape.seq_q, cfg.block_m)
    per_head = shape.batch * shape.heads
    steps: dict[int, int] = {}
    for m in range(m_blocks):
        cols = _visible_cols(min((m + 1) * cfg.block_m, shape.seq_q), shape.seq_k, spec.causal)
        n = cdiv(cols, cfg.block_n) if cols > 0 else 0
        steps[n] = steps.get(n, 0) + per_head
    return sorted(steps.items())


def _dkdv_programs(spec, cfg, shape: Shape) -> list[tuple[int, int]]:
    """(inner steps over query blocks, count) per distinct key-block program of the backward."""
    n_blocks = cdiv(shape.seq_k, cfg.block_n)
    per_head = shape.batch * shape.heads
    steps: dict[int, int] = {}
    for n in range(n_blocks):
        first_row = n * cfg.block_n if spec.causal else 0
        rows = max(shape.seq_q - first_row, 0)
        count = cdiv(rows, cfg.block_m) if rows > 0 else 0
        steps[count] = steps.get(count, 0) + per_head
    return sorted(steps.items())


def _grid_time(
    programs: list[tuple[int, int]], step_s: float, slots: int, per_program_s: float = 0.0
) -> float:
    """Makespan of the grid: balanced waves over `slots`, never shorter than the longest
    program; `per_program_s` is each program's fixed cost (prologue, epilogue)."""
    total_steps = sum(n * count for n, count in programs)
    n_programs = sum(count for _, count in programs)
    if n_programs == 0:
        return 0.0
    mean_steps = total_steps / n_programs
    waves = cdiv(n_programs, slots)
    longest = max(n for n, _ in programs)
    steps = max(waves * mean_steps, longest, total_steps / slots)
    return steps * step_s + waves * per_program_s


def _kernel_time(
    spec, cfg, device, rates: Rates, programs, rows: int, cols: int, products: int, loads: int
) -> float:
    """Time of one kernel whose programs loop `programs` steps over `rows` x `cols` tiles.

    products: matrix products of size rows x cols x D per step; loads: tiles of cols x D read
    per step (K and V in the forward, Q and dO in the dK/dV kernel, ...).
    """
    resident = programs_per_sm(spec, cfg, device)
    if resident == 0:
        return math.inf
    d = spec.block_d
    eff = _mma_efficiency(spec, cfg, device, rows)
    # The SM's throughput is shared by the resident programs; a lone program also cannot
    # overlap its softmax with its products, several can.
    mma_s = products * 2.0 * rows * cols * d / (rates.tensor_flops * eff)
    exp_s = rows * cols / rates.exp_per_s
    overlap = 0.5 if resident * cfg.num_warps >= 8 else 0.2
    math_s = mma_s + exp_s * (1.0 - overlap)
    load_s = loads * cols * d * ELEM_BYTES[spec.dtype] / rates.l2_bytes
    step_s = _step_time(math_s, load_s, cfg.num_stages, resident) * resident
    # The pipeline prologue issues stages - 1 loads before the first product: not overlapped.
    prologue_s = max(cfg.num_stages - 1, 1) * load_s * resident
    return _grid_time(programs, step_s, resident * device.sm_count, prologue_s)


def estimate_ms(spec, cfg, shape: Shape, device) -> float:
    """Estimated milliseconds of one forward (spec.direction "fwd") or backward launch.

    Returns math.inf for a config that cannot run on `device` (no program fits an SM).
    """
    rates = device_rates(device, spec.dtype)
    esize = ELEM_BYTES[spec.dtype]
    heads_total = shape.batch * shape.heads
    kv_total = shape.batch * shape.kv_heads
    d = spec.head_dim
    if spec.direction == "fwd":
        kernel = _kernel_time(
            spec, cfg, device, rates, _forward_programs(spec, cfg, shape),
            cfg.block_m, cfg.block_n, products=2, loads=2,
        )  # fmt: skip
        unique = (heads_total * 2 * shape.seq_q + kv_total * 2 * shape.seq_k) * d * esize
        launches = 1
    else:
        dkdv = _kernel_time(
            spec, cfg, device, rates, _dkdv_programs(spec, cfg, shape),
            cfg.block_n, cfg.block_m, products=4, loads=2,
        )  # fmt: skip
        dq = _kernel_time(
            spec, cfg, device, rates, _forward_programs(spec, cfg, shape),
            cfg.block_m, cfg.block_n, products=3, loads=2,
        )  # fmt: skip
        kernel = dkdv + dq
        unique = (heads_total * 6 * shape.seq_q + kv_total * 4 * shape.seq_k) * d * esize
        launches = 3
    if math.isinf(kernel):
        return math.inf
    memory_floor = unique / rates.hbm_bytes_total
    return (max(kernel, memory_floor) + launches * _LAUNCH_S) * 1e3


def attention_flops(spec, shape: Shape) -> float:
    """Useful FLOPs of one launch: 4·B·H·(visible pairs)·D forward, 2.5x that backward."""
    if spec.causal:
        # Row i sees min(i + 1, Sk) keys (top-left aligned).
        full_rows = max(shape.seq_q - shape.seq_k, 0)
        tri = min(shape.seq_q, shape.seq_k)
        pairs = tri * (tri + 1) // 2 + full_rows * shape.seq_k
    else:
        pairs = shape.seq_q * shape.seq_k
    fwd = 4.0 * shape.batch * shape.heads * pairs * spec.head_dim
    return fwd if spec.direction == "fwd" else 2.5 * fwd
