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


def test_pick_writes_the_least_sum_with_the_dq_kernels_own_config(tmp_path):
    """On the H200 (capability 9.0) the dQ kernel's time is that of its own config
    (flashgen.hardware.dq_tiles), whatever the dK/dV config."""
    rows = [
        # d128: dQ runs (128,64,8,3) (1.3 ms; the faster (128,128,8,2) is not what runs), so the
        # fastest dK/dV config wins; bwd_sweep timed that very pairing whole ("rule_best":
        # (64,128,8,3) with dQ on its blocks swapped): its whole time is the record's
        _row([4, 16, 16, 4096, 128], False,
             {"64,128,8,3": 2.0, "32,64,4,3": 2.1, "128,128,8,2": 2.2},
             {"128,64,8,3": 1.3, "128,128,8,2": 1.0, "64,64,4,2": 0.9},
             {"rule_best": {"config": "64,128,8,3", "ms": 3.6},
              "sdpa_cudnn": {"ms": 2.4}, "sdpa_flash": {"error": "RuntimeError: no"}}),
        # d64: dQ runs (128,64,4,3); no whole timing of the pairing: the sum is the time;
        # flashgen faster than cuDNN here
        _row([16, 32, 32, 1024, 64], True, {"64,64,4,2": 0.3, "32,64,4,3": 0.35},
             {"128,64,4,3": 0.2, "64,64,4,2": 0.1}, {"sdpa_cudnn": {"ms": 0.6}}),
        # the dQ kernel's config was not timed: no record (the shipped one stays)
        _row([1, 16, 16, 16384, 128], True, {"64,64,4,2": 3.0}, {"64,64,4,2": 2.0}, {}),
        # GQA rows are not keyed
        _row([4, 32, 8, 4096, 128], False, {"64,64,4,2": 0.1}, {"128,64,8,3": 0.1}, {}),
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
    assert full.config == TileConfig(64, 128, 8, 3)
    assert full.time_ms == 3.6 and full.n_trials == 3 and full.measured
    assert full.impl == "sdpa_cudnn" and abs(full.impl_ratio - 3.6 / 2.4) < 1e-9
    causal = by_key[("attn_bwd_d64_causal_bf16", (1024, 1024))]
    assert causal.config == TileConfig(64, 64, 4, 2) and abs(causal.time_ms - 0.5) < 1e-9
    assert causal.impl == "flashgen" and abs(causal.impl_ratio - 0.6 / 0.5) < 1e-9
    assert causal.env.template_hash == "0123456789abcdef"
    kept = by_key[("attn_bwd_d128_causal_bf16", (16384, 16384))]
    assert kept == next(
        r for r in old if (r.spec.uri(), r.bucket) == (kept.spec.uri(), kept.bucket)
    )
    # everything else of the file is still there, once
    assert len(new) == len(old)  # both keys were shipped already: replaced, not added
    assert sum(r.spec == keep for r in new) == sum(r.spec == keep for r in old)
