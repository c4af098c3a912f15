"""Session 66's targeted pattern_fuzz sweep: every case hand-written, in training mode with
attention dropout, a per-key padding mask (left or right) applied as a boolean mask with
masked_fill / torch.where and finfo.min (the reading `mask_reading._dropout_fill` adds), the
other fields as `pattern_fuzz.draw` draws them. Compared as pattern_fuzz compares (float64,
given the mask the kernels drew; rows that see no key are not compared).

Usage: TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/raw/cpu_s66/pf_dropout_fill.py
    --cases 20 --seed 40000 [--json FILE]
"""

import dataclasses
import importlib.util
import pathlib
import random
import sys

_path = pathlib.Path(__file__).parents[2] / "pattern_fuzz.py"
_spec = importlib.util.spec_from_file_location("pattern_fuzz", _path)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["pattern_fuzz"] = fuzz  # (its dataclasses look their module up)
_spec.loader.exec_module(fuzz)
_draw = fuzz.draw


def draw(seed: int):
    r = random.Random(seed * 31 + 7)
    case = _draw(seed)
    gqa = "none" if case.gqa == "sdpa" else case.gqa  # (SDPA's enable_gqa: not by hand)
    return dataclasses.replace(
        case, style="manual", gqa=gqa, train=True, dropout=r.choice(["functional", "module"]),
        pad=r.choice(["right", "left"]), apply=r.choice(["masked_fill", "where"]),
        fill="finfo_min", struct="none", alibi="none", row_term=False,
    )  # fmt: skip


fuzz.draw = draw

if __name__ == "__main__":
    sys.exit(fuzz.main())
