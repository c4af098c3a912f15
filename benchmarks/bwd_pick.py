"""Turn a `bwd_sweep.py` result into the shipped backward records of a GPU's tuning file.

A record's config names the dK/dV kernel's tiles; the dQ kernel then runs
`flashgen.hardware.dq_tiles.dq_config` of it (on sm_90 a measured config of its own, else the
same config). Per MHA shape of the sweep (one per head dim, causal, length bucket; bf16), the
config whose dK/dV time plus its dQ kernel's time is least becomes the record of that spec and
bucket. time_ms is the sweep's whole-backward time where that exact pairing was timed as a
whole (delta, dK/dV and dQ in one call), else the sum of the two kernels timed alone (each
with the delta preprocessing, so counted twice); impl/impl_ratio come from the SDPA backends'
backward timed in the same run (`flashgen.tune.sdpa.pick_impl`), as the tuner records them.
Records of other specs and buckets in the file are kept; the file is validated as a whole
(flashgen.db.portable) before it is rewritten.

Usage: python3 benchmarks/bwd_pick.py bwd_sweep.json tuning_db/nvidia-h200.json [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import pathlib
import sys

# appended: a tree on PYTHONPATH (an A/B's old tree) comes first
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))

from flashgen.core.config import TileConfig  # noqa: E402
from flashgen.core.spec import KernelSpec, shape_bucket  # noqa: E402
from flashgen.db import portable  # noqa: E402
from flashgen.db.records import EnvFingerprint, TuningRecord  # noqa: E402
from flashgen.hardware.costmodel import Shape, attention_flops  # noqa: E402
from flashgen.hardware.dq_tiles import dq_config  # noqa: E402


def _key(cfg: TileConfig) -> str:
    return f"{cfg.block_m},{cfg.block_n},{cfg.num_warps},{cfg.num_stages}"


def best_pair(row: dict, spec: KernelSpec, capability) -> tuple[TileConfig, str, float, int] | None:
    """(config, its dQ kernel's config key, dK/dV ms + dQ ms, how many configs had both timed)
    or None."""
    sums = {}
    for key, ms in row["dkdv"].items():
        cfg = TileConfig(*(int(x) for x in key.split(",")))
        dq_key = _key(dq_config(spec, cfg, capability))
        if dq_key in row["dq"]:
            sums[cfg] = (ms + row["dq"][dq_key], dq_key)
    if not sums:
        return None
    best = min(sums, key=lambda c: (sums[c][0], c))
    return best, sums[best][1], sums[best][0], len(sums)


def _swap(key: str) -> str:
    bm, bn, w, st = key.split(",")
    return ",".join((bn, bm, w, st))


def records_from(sweep: dict, host: str) -> list[TuningRecord]:
    from flashgen.tune.sdpa import pick_impl

    env = sweep["env"]
    fingerprint = EnvFingerprint(
        gpu_name=env["gpu"], capability=env["capability"], sm_count=env["sm_count"],
        smem_optin=env["smem_optin"], triton_version=env["triton"], torch_version=env["torch"],
        flashgen_version=env["flashgen_version"], template_hash=env["template_hash"],
    )  # fmt: skip
    created = _dt.datetime.strptime(sweep["started"], "%Y-%m-%d %H:%M:%S UTC")
    created = created.replace(tzinfo=_dt.timezone.utc)
    capability = tuple(int(x) for x in env["capability"].split("."))
    out = []
    for row in sweep["rows"]:
        b, hq, hkv, n, d = row["shape"]
        spec = KernelSpec(d, bool(row["causal"]), "bfloat16", "bwd")
        picked = best_pair(row, spec, capability)
        if hq != hkv or picked is None:
            continue
        cfg, dq_key, summed, n_trials = picked
        # bwd_sweep's "rule_best" whole backward paired each config with its blocks swapped
        full = row.get("full", {}).get("rule_best", {})
        same = full.get("config") == _key(cfg) and dq_key == _swap(_key(cfg))
        ms = full["ms"] if same else summed
        flops = attention_flops(spec, Shape(b, hq, hkv, n, n))
        times = {"flashgen": ms}
        for impl in ("sdpa_cudnn", "sdpa_flash"):
            vendor = row.get("full", {}).get(impl, {})
            if "ms" in vendor:
                times[impl] = vendor["ms"]
        impl, ratio = pick_impl(times)
        if ratio is None:  # nothing compared: flashgen, "not compared"
            impl = "flashgen"
        out.append(TuningRecord(
            spec=spec, bucket=shape_bucket(n, n), env=fingerprint, config=cfg, time_ms=ms,
            tflops=flops / (ms * 1e-3) / 1e12, n_trials=n_trials, measured=True, host=host,
            created_at=created, impl=impl, impl_ratio=ratio,
        ))  # fmt: skip
    return out


def merge(old: list[TuningRecord], new: list[TuningRecord]) -> list[TuningRecord]:
    """`old` with every record of a (spec, bucket, GPU) in `new` replaced by the new one."""
    keys = {(r.spec, r.bucket, r.env.gpu_name) for r in new}
    kept = [r for r in old if (r.spec, r.bucket, r.env.gpu_name) not in keys]
    return sorted(kept + new, key=lambda r: (r.spec.uri(), r.bucket))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="bwd_sweep.json from benchmarks/bwd_sweep.py")
    parser.add_argument(
        "records", help="the tuning file to update, e.g. tuning_db/nvidia-h200.json"
    )
    parser.add_argument("--host", default="h200-batch", help="the records' host field")
    parser.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = parser.parse_args(argv)
    sweep = json.loads(pathlib.Path(args.sweep).read_text())
    new = records_from(sweep, args.host)
    old = portable.load(args.records) if pathlib.Path(args.records).exists() else []
    for r in new:
        print(f"{r.spec.uri()} {list(r.bucket)} {r.config.short()} {r.time_ms:.3f} ms "
              f"{r.tflops:.0f} TFLOP/s impl={r.impl} ratio={r.impl_ratio}")  # fmt: skip
    if not args.dry_run:
        merged = merge(old, new)
        portable.parse_document(portable.to_document(merged))  # the whole file validates
        portable.dump(merged, args.records)
        print(f"wrote {len(merged)} records ({len(new)} new) to {args.records}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
