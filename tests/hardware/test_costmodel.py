"""The cost model that ranks candidates without a GPU: each effect it claims to model moves the
estimate in the right direction, and it agrees with the H200 grid on what is clearly bad."""

from __future__ import annotations

import dataclasses
import math

import pytest

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.hardware.costmodel import Shape, attention_flops, estimate_ms, programs_per_sm
from flashgen.hardware.sram import KNOWN_GPUS

H200 = KNOWN_GPUS["nvidia-h200"]
A100 = KNOWN_GPUS["nvidia-a100"]
FWD = KernelSpec(128, False, "bfloat16", "fwd")
CAUSAL = KernelSpec(128, True, "bfloat16", "fwd")
GOOD = TileConfig(128, 64, 4, 2)  # the H200 grid's best for hd128 non-causal
LONG = Shape(batch=4, heads=16, kv_heads=16, seq_q=4096, seq_k=4096)


def test_flops_count_causal_pairs_top_left():
    full = attention_flops(FWD, Shape(1, 1, 1, 4, 4))
    causal = attention_flops(CAUSAL, Shape(1, 1, 1, 4, 4))
    assert full == 4 * 16 * 128 and causal == 4 * 10 * 128  # rows see 1+2+3+4 keys
    assert attention_flops(CAUSAL, Shape(1, 1, 1, 6, 4)) == 4 * (10 + 2 * 4) * 128
    bwd = KernelSpec(128, False, "bfloat16", "bwd")
    assert attention_flops(bwd, LONG) == pytest.approx(2.5 * attention_flops(FWD, LONG))


def test_causal_skips_the_upper_triangle():
    full = estimate_ms(FWD, GOOD, LONG, H200)
    causal = estimate_ms(CAUSAL, GOOD, LONG, H200)
    assert 0.45 * full < causal < 0.7 * full


def test_estimate_is_plausible_against_the_h200_baseline():
    """hd128 bf16 4k non-causal: the plain Triton kernel reached 502 TFLOP/s on the H200."""
    ms = estimate_ms(FWD, GOOD, LONG, H200)
    achieved = attention_flops(FWD, LONG) / (ms * 1e-3) / 1e12
    assert 250 < achieved < 989


def test_wave_quantisation():
    """One program more than the GPU holds at once costs a whole extra wave."""
    slots = programs_per_sm(FWD, GOOD, H200) * H200.sm_count
    blocks = 8  # seq 1024 / block_m 128
    fit = Shape(batch=1, heads=slots // blocks, kv_heads=slots // blocks, seq_q=1024, seq_k=1024)
    over = dataclasses.replace(fit, heads=fit.heads + 1, kv_heads=fit.heads + 1)
    t_fit, t_over = estimate_ms(FWD, GOOD, fit, H200), estimate_ms(FWD, GOOD, over, H200)
    assert t_over > 1.6 * t_fit


def test_ragged_tiles_waste_work():
    """1025 keys with 128-key blocks compute a nearly empty 9th block: more than 1024 keys."""
    even = Shape(4, 16, 16, 1024, 1024)
    ragged = dataclasses.replace(even, seq_k=1025)
    cfg = TileConfig(128, 128, 8, 2)
    assert estimate_ms(FWD, cfg, ragged, H200) > 1.08 * estimate_ms(FWD, cfg, even, H200)


def test_tiny_tiles_and_unpipelined_loads_are_slower():
    tiny = estimate_ms(FWD, TileConfig(16, 16, 2, 2), LONG, H200)
    single_stage = estimate_ms(FWD, TileConfig(128, 64, 4, 1), LONG, H200)
    good = estimate_ms(FWD, GOOD, LONG, H200)
    assert tiny > 2 * good and single_stage > good


def test_too_few_rows_per_warp_is_slower():
    assert estimate_ms(FWD, TileConfig(64, 64, 8, 2), LONG, H200) > estimate_ms(
        FWD, TileConfig(64, 64, 4, 2), LONG, H200
    )


def test_config_that_does_not_fit_is_infinite():
    huge = TileConfig(256, 256, 4, 5)
    assert programs_per_sm(FWD, huge, A100) == 0
    assert math.isinf(estimate_ms(FWD, huge, LONG, A100))


def test_backward_costs_more_than_forward_and_unknown_gpus_work():
    bwd = KernelSpec(128, False, "bfloat16", "bwd")
    cfg = TileConfig(64, 64, 4, 2)
    assert estimate_ms(bwd, cfg, LONG, H200) > 2 * estimate_ms(FWD, cfg, LONG, H200)
    odd = dataclasses.replace(H200, name="Some Future GPU", capability=(10, 0))
    assert 0 < estimate_ms(FWD, cfg, LONG, odd) < math.inf


# Measured TFLOP/s of a plain Triton forward kernel on the H200 (bf16; a baseline measured before
# this repository's benchmarks, kept here as data), keyed (block_m, block_n, warps, stages), in
# two cases: (hd128 4k non-causal, hd64 4k causal); None where the config failed in that case.
H200_GRID = {
    (64, 32, 4, 2): (428, 304), (64, 32, 4, 3): (422, 347), (64, 32, 4, 4): (372, 329),
    (64, 32, 8, 2): (185, 155), (64, 32, 8, 3): (215, 181), (64, 32, 8, 4): (215, 180),
    (64, 64, 4, 2): (417, 377), (64, 64, 4, 3): (461, 407), (64, 64, 4, 4): (330, 348),
    (64, 64, 8, 2): (284, 179), (64, 64, 8, 3): (302, 214), (64, 64, 8, 4): (221, 215),
    (64, 128, 4, 2): (335, None), (64, 128, 4, 3): (397, None), (64, 128, 8, 2): (252, None),
    (64, 128, 8, 3): (282, None), (128, 32, 4, 2): (390, 302), (128, 32, 4, 3): (442, 343),
    (128, 32, 4, 4): (437, 339), (128, 32, 8, 2): (402, 242), (128, 32, 8, 3): (465, 314),
    (128, 32, 8, 4): (449, 317), (128, 64, 4, 2): (502, 332), (128, 64, 4, 3): (424, 391),
    (128, 64, 4, 4): (431, 388), (128, 64, 8, 2): (382, 339), (128, 64, 8, 3): (485, 403),
    (128, 64, 8, 4): (483, 393), (128, 128, 4, 2): (300, 344), (128, 128, 4, 3): (333, 374),
    (128, 128, 4, 4): (None, 248), (128, 128, 8, 2): (438, 270), (128, 128, 8, 3): (500, 321),
    (128, 128, 8, 4): (None, 310),
}  # fmt: skip


def _measured(case: int) -> dict[tuple[int, int, int, int], int]:
    """One case's column of H200_GRID: config -> TFLOP/s, the failed configs left out."""
    return {cfg: tflops[case] for cfg, tflops in H200_GRID.items() if tflops[case] is not None}


def _ranks(values: list[float]) -> list[int]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0] * len(values)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


@pytest.mark.parametrize(
    ("spec", "shape", "measured"),
    [
        pytest.param(FWD, LONG, _measured(0), id="hd128-4k"),
        pytest.param(
            KernelSpec(64, True, "bfloat16", "fwd"),
            Shape(4, 32, 32, 4096, 4096),
            _measured(1),
            id="hd64-4k-causal",
        ),
    ],
)
def test_ranking_agrees_with_the_h200_grid(spec, shape, measured):
    """The model's favourite reaches >= 85% of the measured best, and its order correlates with
    the measured order (Spearman >= 0.5): good enough to rank without a GPU and to seed."""
    configs = [TileConfig(*key) for key in measured]
    model = [estimate_ms(spec, c, shape, H200) for c in configs]
    favourite = configs[min(range(len(configs)), key=model.__getitem__)]
    best = max(measured.values())
    assert measured[tuple(favourite.as_dict().values())] >= 0.85 * best
    speed = [-m for m in model]
    a, b = _ranks(speed), _ranks([float(v) for v in measured.values()])
    n = len(a)
    rho = 1 - 6 * sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) / (n * (n * n - 1))
    assert rho >= 0.5, rho


# The H200 grid of benchmarks/tuner_vs_grid.py (run at e9597f4, 53-72 configs per case, bf16):
# the configs within 3% of each case's measured best. The tuner seeds its first round of
# compiles with the cost model's favourites over the WHOLE fitting space (`model_ranked`, as many
# as the lookahead) and `model_explorers`; this checks those very seeds at the lookahead the
# H200 benchmark ran with (14). At lookahead 8 (`flashgen tune` on a 16-core host) the model's
# seeds miss the winner in the two hd64 forward cases, where only the defaults table's seed
# (set from these grids) has it.
H200_GRID_WINNERS = [
    (128, False, "fwd", 4096, [(128, 64, 4, 2)]),
    (128, True, "fwd", 1024, [(64, 64, 4, 3)]),
    (64, False, "fwd", 1024, [(64, 128, 4, 2)]),
    (64, True, "fwd", 4096, [(64, 128, 4, 2)]),
    (128, False, "bwd", 1024, [(128, 128, 8, 2)]),
    (128, True, "bwd", 4096, [(64, 64, 4, 2)]),
    (64, False, "bwd", 4096, [(64, 64, 4, 2), (64, 64, 4, 3), (128, 64, 4, 2)]),
    (64, True, "bwd", 1024, [(64, 64, 4, 2), (64, 64, 4, 3)]),
]


@pytest.mark.parametrize(("head_dim", "causal", "direction", "seq", "winners"), H200_GRID_WINNERS)
def test_model_seeds_include_a_measured_winner(head_dim, causal, direction, seq, winners):
    from flashgen.hardware.tiles import pruned
    from flashgen.tune.space import model_explorers, model_ranked
    from flashgen.tune.tasks import Settings, Task

    spec = KernelSpec(head_dim, causal, "bfloat16", direction)
    task, fitting, settings = Task(spec, (seq, seq)), pruned(spec, H200), Settings(lookahead=14)
    seeds = model_ranked(task, H200, fitting, settings.n_model_seeds())
    seeds += model_explorers(task, H200, fitting, seeds, settings.explore)
    got = [tuple(c.as_dict().values()) for c in seeds]
    assert set(got) & {tuple(w) for w in winners}, got
