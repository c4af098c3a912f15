"""benchmarks/bwd_pick.py turns a bwd_sweep.py result into backward records of a tuning file:
the config whose dK/dV time plus its swapped-block dQ time is least, the vendor comparison
from the same run, other records kept, and a file the run time's loader accepts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from flashgen.core.config import TileConfig
from flashgen.core.spec import KernelSpec
from flashgen.db import portable

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bwd_pick.py"
ENV = {"torch": "2.11.0", "triton": "3.6.0", "flashgen_version": "0.1.0",
       "template_hash": "0123456789abcdef", "gpu": "NVIDIA H200", "capability": "9.0",
       "sm_count": 132, "smem_optin": 232448}  # fmt: skip


def _row(shape, causal, dkdv, dq, full):
    return {"shape": shape, "causal": causal, "dkdv": dkdv, "dq": dq, "full": full}


def test_pick_writes_the_least_sum_under_the_swap_rule(tmp_path):
    rows = [
        # (32,128): dK/dV 1.0 + dQ at (128,32) 0.9 = 1.9 beats (128,128): 1.2 + 0.8 = 2.0;
        # (64,128)'s dQ (128,64) was not timed, so it cannot be picked despite dK/dV 0.5
        _row([4, 16, 16, 4096, 128], False,
             {"32,128,8,2": 1.0, "128,128,8,2": 1.2, "64,128,8,2": 0.5},
             {"128,32,8,2": 0.9, "128,128,8,2": 0.8, "64,128,8,2": 0.1},
             {"rule_best": {"config": "32,128,8,2", "ms": 1.85},
              "sdpa_cudnn": {"ms": 1.5}, "sdpa_flash": {"error": "RuntimeError: no"}}),
        # flashgen faster than cuDNN; no whole-backward timing: the sum is the time
        _row([16, 32, 32, 1024, 64], True, {"64,64,4,2": 0.3}, {"64,64,4,2": 0.2},
             {"sdpa_cudnn": {"ms": 0.6}}),
        # GQA rows are not keyed
        _row([4, 32, 8, 4096, 128], False, {"64,64,4,2": 0.1}, {"64,64,4,2": 0.1}, {}),
    ]  # fmt: skip
    sweep = tmp_path / "bwd_sweep.json"
    sweep.write_text(json.dumps({"started": "2026-12-01 00:30:00 UTC", "env": ENV, "rows": rows}))
    records = tmp_path / "h200.json"
    keep = KernelSpec(128, False, "bfloat16", "fwd")
    old = portable.parse_document(json.loads((Path(__file__).resolve().parents[2]
                                              / "tuning_db" / "nvidia-h200.json").read_text()))  # fmt: skip
    replaced = [r for r in old if r.spec == KernelSpec(128, False, "bfloat16", "bwd")
                and r.bucket == (4096, 4096)]  # fmt: skip
    assert replaced, "the shipped file has a record the pick replaces"
    portable.dump(old, records)
    done = subprocess.run([sys.executable, str(SCRIPT), str(sweep), str(records)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    new = portable.load(records)
    by_key = {(r.spec.uri(), r.bucket): r for r in new}
    full = by_key[("attn_bwd_d128_full_bf16", (4096, 4096))]
    assert full.config == TileConfig(32, 128, 8, 2)
    assert full.time_ms == 1.85 and full.n_trials == 2 and full.measured
    assert full.impl == "sdpa_cudnn" and abs(full.impl_ratio - 1.85 / 1.5) < 1e-9
    causal = by_key[("attn_bwd_d64_causal_bf16", (1024, 1024))]
    assert causal.config == TileConfig(64, 64, 4, 2) and abs(causal.time_ms - 0.5) < 1e-9
    assert causal.impl == "flashgen" and abs(causal.impl_ratio - 0.6 / 0.5) < 1e-9
    assert causal.env.template_hash == "0123456789abcdef"
    # everything else of the file is still there, once
    assert len(new) == len(old)  # both keys were shipped already: replaced, not added
    assert sum(r.spec == keep for r in new) == sum(r.spec == keep for r in old)
