"""Tune on a cluster: N `flashgen tune` workers on one PostgreSQL URL, then ship the records.

    python examples/cluster_tuning.py --db postgresql://user@dbhost/flashgen --workers 4
    python examples/cluster_tuning.py --db postgresql://... -- --head-dim 128 --seq-len 4096,16384
    python examples/cluster_tuning.py --db postgresql://... --smoke     # tiny, CPU (CI)

What it does, step by step (each command is printed before it runs, so the example doubles as
a recipe for real machines):

1. starts `--workers` processes of `flashgen tune --db URL --seed i` at once, as N machines
   would (here all on this host; on a cluster run the same command on each GPU machine). They
   share one Optuna study per (kernel spec, shape bucket) through PostgreSQL, so the trials
   split between them and each record keeps the best any worker found. Arguments after `--` go
   to every `flashgen tune` (default: its GPU defaults, or tiny CPU settings with --smoke);
2. `flashgen db show --db URL`: the records the cluster wrote;
3. `flashgen db export records.json --db URL --measured-only` (without `--measured-only` under
   --smoke, where the CPU's records are modelled): portable JSON, validated on import;
4. `flashgen db import records.json --db sqlite:///<out>/offline.sqlite3`: what a machine without
   database access does (point FLASHGEN_DB_URL there, or ship the file in `tuning_db/`);
5. exports the offline database again and checks that it holds the same records.

SQLite cannot be shared between processes (its locks), so --db must be PostgreSQL. Exit status
1 when a worker failed or the records did not survive the round trip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import common

SMOKE_TUNE = ["--head-dim", "16", "--dtype", "float16", "--causal", "false", "--seq-len", "64",
              "--direction", "fwd", "--trials", "2", "--patience", "0"]  # fmt: skip


def parse(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    tune_args = []
    if "--" in argv:
        cut = argv.index("--")
        argv, tune_args = argv[:cut], argv[cut + 1 :]
    p = common.base_parser(__doc__)
    p.add_argument("--db", default=os.environ.get("FLASHGEN_DB_URL"),
                   help="PostgreSQL URL shared by the workers (default FLASHGEN_DB_URL)")  # fmt: skip
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--out", default=None, help="folder for records.json and the offline SQLite")
    args = p.parse_args(argv)
    if not args.db or not args.db.startswith("postgresql"):
        p.error(f"--db must be a PostgreSQL URL (workers cannot share SQLite), got {args.db!r}")
    if args.workers < 1:
        p.error("--workers must be at least 1")
    args.tune_args = tune_args or (SMOKE_TUNE if args.smoke else [])
    return args


def flashgen(*argv, env=None, capture=False):
    """Run one `flashgen` command as a user would (a new process), printing it first."""
    cmd = [sys.executable, "-m", "flashgen.cli", *argv]
    shown = " ".join(a if "@" not in a else a.split("@")[0].split("//")[0] + "//...@" + a.split("@")[1]
                     for a in argv)  # fmt: skip
    print(f"$ flashgen {shown}", flush=True)
    return subprocess.run(cmd, env=env, capture_output=capture, text=True)


def main(argv=None) -> int:
    args = parse(argv)
    env = dict(os.environ)
    if args.smoke and not _has_cuda():
        env["TRITON_INTERPRET"] = "1"
    out = args.out or tempfile.mkdtemp(prefix="flashgen-cluster-")
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "flashgen.cli", "tune", "--db", args.db, "--quiet"]
    print(f"$ flashgen tune --db ... --quiet --seed I {' '.join(args.tune_args)}  "
          f"(x{args.workers}, I = 0..{args.workers - 1})", flush=True)  # fmt: skip
    workers = [
        subprocess.Popen([*cmd, "--seed", str(i), *args.tune_args], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(args.workers)
    ]  # fmt: skip
    failed = []
    for i, proc in enumerate(workers):
        text, _ = proc.communicate()
        print(f"-- worker {i}: exit {proc.returncode}")
        if proc.returncode:
            failed.append(i)
            print(text[-2000:])
    if failed:
        print(f"workers {failed} failed", file=sys.stderr)
        return 1
    flashgen("db", "show", "--db", args.db, env=env)
    records = os.path.join(out, "records.json")
    offline = f"sqlite:///{os.path.join(out, 'offline.sqlite3')}"
    measured = [] if args.smoke else ["--measured-only"]
    steps = [
        ("db", "export", records, "--db", args.db, *measured),
        ("db", "import", records, "--db", offline),
        ("db", "show", "--db", offline),
        ("db", "export", records + ".back", "--db", offline),
    ]
    for step in steps:
        if flashgen(*step, env=env).returncode:
            return 1
    sent, back = (_records(p) for p in (records, records + ".back"))
    same = sent == back and len(sent) > 0
    print(f"{len(sent)} record(s) exported, {len(back)} in the offline database: "
          f"{'the same' if same else 'DIFFERENT'}")  # fmt: skip
    common.write_json(args.json, {"workers": args.workers, "records": len(sent), "same": same})
    return 0 if same else 1


def _records(path: str) -> list:
    """The records of an export, in a stable order, without the export's own timestamp."""
    with open(path) as handle:
        data = json.load(handle)
    rows = data["records"] if isinstance(data, dict) else data
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    raise SystemExit(main())
