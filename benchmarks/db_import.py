"""`flashgen db import` of a large portable file: wall time and peak memory (CPU; no GPU).

    python benchmarks/db_import.py --records 200000 [--db URL] [--flashgen PATH]

Writes N distinct valid records (distinct spec x bucket keys, one environment) to a JSON file,
then runs, each as its own `flashgen db import` process: an import into an empty database and a
re-import of the same file (no record changes). Prints one JSON line per step: wall seconds, the
process's CPU seconds and peak RSS (MB), and the CLI's summary line. `--flashgen` picks the executable (e.g. another
checkout's venv) to compare before/after. The database is created fresh: a SQLite file in a
temporary directory, or the PostgreSQL URL given (its flashgen tables are dropped first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ENV = {
    "gpu_name": "NVIDIA H200", "capability": "9.0", "sm_count": 132, "smem_optin": 232448,
    "triton_version": "3.6.0", "torch_version": "2.11.0", "flashgen_version": "0.1.0",
    "template_hash": "0123456789abcdef",
}  # fmt: skip


def records(n: int):
    """N valid portable records with distinct (spec, bucket) keys, deterministic."""
    specs = (
        f"attn_{d}_d{h}_{m}_{t}"
        for d, h, m, t in itertools.product(
            ("fwd", "bwd"), range(16, 257), ("causal", "full"), ("f16", "bf16", "f32")
        )
    )
    buckets = [(1 << q, 1 << k) for q in range(4, 15) for k in range(4, 15)]
    created = dt.datetime(2026, 11, 30, tzinfo=dt.timezone.utc).isoformat()
    keys = itertools.product(specs, buckets)
    for i, (spec, (bq, bk)) in enumerate(itertools.islice(keys, n)):
        yield {
            "spec": spec, "bucket": [bq, bk],
            "config": {"block_m": 64, "block_n": 32 << (i % 3), "num_warps": 4 << (i % 2),
                       "num_stages": 1 + i % 4},
            "time_ms": 0.1 + (i % 997) / 1000, "tflops": 100.0 + i % 50, "n_trials": 40,
            "measured": bool(i % 2), "host": "bench", "created_at": created, "env": ENV,
            "impl": "flashgen", "impl_ratio": None,
        }  # fmt: skip


def run_import(flashgen: str, path: str, url: str) -> dict:
    """One `flashgen db import` process: wall time and its own peak RSS (os.wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([flashgen, "db", "import", path, "--db", url], stdout=out,
                                stderr=err)  # fmt: skip
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read(), err.read()
    return {
        "wall_s": round(wall, 2),
        # CPU seconds of the import process: what it costs when the machine is shared (the
        # wall time then also counts the time other processes held the cores).
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "rc": proc.returncode,
        "out": (text.strip().splitlines() or [""])[-1][:200],
        "err": errors.strip()[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--db", help="PostgreSQL URL (default: a fresh SQLite file)")
    parser.add_argument("--flashgen", default=shutil.which("flashgen") or "flashgen")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="fg-import-bench-")
    path = os.path.join(work, "records.json")
    doc = {"format": "flashgen-tuning-db", "version": 2, "records": list(records(args.records))}
    assert len(doc["records"]) == args.records, "not enough distinct keys"
    with open(path, "w") as f:
        json.dump(doc, f)
    url = args.db or f"sqlite:///{os.path.join(work, 'tuning.sqlite3')}"
    if args.db:
        import sqlalchemy as sa

        engine = sa.create_engine(args.db)
        with engine.begin() as conn:
            for table in ("flashgen_records", "flashgen_trials", "flashgen_pending",
                          "flashgen_alembic_version"):  # fmt: skip
                conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        engine.dispose()
    common = {"load_avg_1m": os.getloadavg()[0], "records": args.records, "file_mb": round(os.path.getsize(path) / 2**20, 1),
              "dialect": url.split(":", 1)[0], "flashgen": args.flashgen}  # fmt: skip
    for step in ("import into empty", "re-import, no change"):
        print(json.dumps({"step": step, **common, **run_import(args.flashgen, path, url)}))
        sys.stdout.flush()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
