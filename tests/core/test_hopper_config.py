"""HopperConfig validates every field (its values reach a template and a launch)."""

from __future__ import annotations

import pytest

from flashgen.core.config import FieldError
from flashgen.core.hopper_config import HopperConfig, max_regs

SHIPPED_128 = HopperConfig(128, 128, 2, 2, 4, 168, False)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(block_m=96), "block_m"),  # not consumers * 16 * warps
        (dict(block_n=256), "block_n"),
        (dict(num_buf=1), "num_buf"),
        (dict(consumers=4, block_m=256), "consumers"),
        (dict(num_warps=8), "num_warps"),  # 8 warps only with one consumer
        (dict(maxnreg=170), "maxnreg"),  # not a multiple of 8
        (dict(maxnreg=176), "maxnreg"),  # 384 threads x 176 > 65,536
        (dict(pingpong=1), "pingpong"),  # an int is not a bool
        (dict(block_n=128.0), "block_n"),
        (dict(persistent="yes"), "persistent"),
        (dict(dynamic=True), "dynamic"),  # a dynamic grid is a persistent one
        (dict(persistent=True, dynamic=1), "dynamic"),
        (dict(persistent=True, tail_split=0), "tail_split"),
        (dict(persistent=True, tail_split=17), "tail_split"),
        (dict(persistent=True, tail_split=4.0), "tail_split"),
        (dict(tail_split=4), "tail_split"),  # a split last round needs a persistent grid
    ],
    ids=lambda x: str(x),
)
def test_rejects(kwargs, field):
    values = {**SHIPPED_128.__dict__, **kwargs}
    with pytest.raises(FieldError) as err:
        HopperConfig(**values)
    assert err.value.field == field


def test_pingpong_needs_two_consumers():
    with pytest.raises(FieldError, match="two consumers"):
        HopperConfig(64, 128, 3, 1, 4, 128, True)


def test_counts():
    # Two Q tiles and one O staging tile (3 x 128 rows), 2 slots each of K and V (128 rows),
    # hd128, 2 bytes; q_ready/q_empty for each of 2 Q buffers per consumer, 4 per slot, 2 turn;
    # the work item index of each Q buffer (4 bytes).
    assert SHIPPED_128.shared_bytes(128) == (384 + 512) * 128 * 2 + 8 * (8 + 8 + 2) + 4 * 4
    assert SHIPPED_128.threads() == 384
    assert HopperConfig(192, 64, 3, 3, 4, 128, False).threads() == 512
    assert max_regs(2, 4) == 168 and max_regs(3, 4) == 128 and max_regs(1, 4) == 248
    assert SHIPPED_128.with_persistent().persistent and not SHIPPED_128.persistent
    assert "c2w4" in SHIPPED_128.short()


def test_dynamic_follows_the_grid():
    dynamic = HopperConfig(128, 128, 2, 2, 4, 168, False, True, True)
    assert dynamic.short().endswith(" PD)") and SHIPPED_128.short().endswith("r168)")
    # a plain grid has no item counter: dropping persistence drops the dynamic choice
    assert dynamic.with_persistent(False) == SHIPPED_128
    assert dynamic.with_persistent(True) == dynamic


def test_tail_split_follows_the_grid():
    split = HopperConfig(128, 128, 2, 2, 4, 168, False, True, tail_split=8)
    assert split.short().endswith(" Ps8)")
    assert split.with_persistent(False) == SHIPPED_128
