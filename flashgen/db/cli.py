"""Show, export, import and merge tuning databases.

  flashgen db show    [--db URL]        table of the best config per spec, bucket and GPU, and
                                        which implementation won (flashgen or an SDPA backend)
  flashgen db pending [--db URL]        shapes seen at run time that have no exact record
  flashgen db export FILE [--db URL]    portable JSON (the tuning_db/ format); show and export
                                        take --gpu NAME and --measured-only
  flashgen db import FILE [--db URL]    validate the whole file, then keep-best upsert each record
  flashgen db merge URL   [--db URL]    keep-best upsert of every record of another database

--db defaults to FLASHGEN_DB_URL, else ~/.cache/flashgen/tuning.sqlite3. Passwords in URLs
are never printed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        metavar="URL",
        default=None,
        help="database URL (default: FLASHGEN_DB_URL or the cache file)",
    )
    sub = parser.add_subparsers(dest="db_command", metavar="ACTION")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument(
        "--gpu", metavar="NAME", help="only records tuned on this GPU (e.g. 'NVIDIA H200')"
    )
    filters.add_argument(
        "--measured-only", action="store_true", help="leave out records chosen by the cost model"
    )
    sub.add_parser("show", parents=[common, filters], help="table of tuned records")
    sub.add_parser("pending", parents=[common], help="shapes waiting to be tuned")
    export = sub.add_parser(
        "export", parents=[common, filters], help="write records as portable JSON"
    )
    export.add_argument("file", metavar="FILE")
    imp = sub.add_parser("import", parents=[common], help="validate a JSON file and merge it in")
    imp.add_argument("file", metavar="FILE")
    merge = sub.add_parser("merge", parents=[common], help="merge every record of another database")
    merge.add_argument("source", metavar="URL")
    parser.set_defaults(_db_parser=parser)


def age(when: _dt.datetime, now: _dt.datetime | None = None) -> str:
    """Short human age: 42s, 7m, 3h, 12d."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _selected(db, args) -> list:
    """Records after the --gpu / --measured-only filters."""
    records = db.records()
    if getattr(args, "gpu", None):
        records = [r for r in records if r.env.gpu_name.lower() == args.gpu.lower()]
    if getattr(args, "measured_only", False):
        records = [r for r in records if r.measured]
    return records


def _show(db, args) -> int:
    from ..impls import impl_label

    records = _selected(db, args)
    rows = [
        [
            r.spec.uri(),
            f"{r.bucket[0]}x{r.bucket[1]}",
            r.env.gpu_name,
            r.config.short(),
            f"{r.time_ms:.4f}",
            f"{r.tflops:.1f}",
            "measured" if r.measured else "modelled",
            impl_label(r.impl, r.impl_ratio),
            age(r.created_at),
        ]
        for r in records
    ]
    headers = ["spec", "bucket", "gpu", "config", "time_ms", "TFLOP/s", "source",
               "winner / vs next", "age"]  # fmt: skip
    print(f"# {db.url_safe}: {len(records)} record(s)")
    if rows:
        print(_table(headers, rows))
    return 0


def _pending(db) -> int:
    rows = [
        [
            p["spec"].uri(),
            f"{p['bucket'][0]}x{p['bucket'][1]}",
            p["gpu_name"] or "-",
            str(p["seen"]),
            age(p["last_seen"]),
        ]
        for p in db.pending_rows()
    ]
    print(f"# {db.url_safe}: {len(rows)} pending shape(s)")
    if rows:
        print(_table(["spec", "bucket", "gpu", "seen", "last_seen"], rows))
    return 0


def run(args: argparse.Namespace) -> int:
    from . import connect
    from .portable import FormatError, dump, load
    from .repository import DatabaseError

    if not getattr(args, "db_command", None):
        args._db_parser.print_help()
        return 2
    try:
        if args.db_command == "import":
            records = load(args.file)  # the whole file is validated before the DB is touched
        db = connect(args.db)
        try:
            if args.db_command == "show":
                return _show(db, args)
            if args.db_command == "pending":
                return _pending(db)
            if args.db_command == "export":
                count = dump(_selected(db, args), args.file)
                print(f"exported {count} record(s) from {db.url_safe} to {args.file}")
                return 0
            if args.db_command == "import":
                wins = db.upsert_many(records)
                print(
                    f"imported {args.file} into {db.url_safe}: {len(records)} record(s), "
                    f"{wins} written, {len(records) - wins} kept (stored one as good or better)"
                )
                return 0
            source = connect(args.source)
            try:
                records = source.records()
            finally:
                source.close()
            wins = db.upsert_many(records)
            print(
                f"merged {source.url_safe} into {db.url_safe}: {len(records)} record(s), "
                f"{wins} written, {len(records) - wins} kept"
            )
            return 0
        finally:
            db.close()
    except (FormatError, DatabaseError) as exc:
        print(f"flashgen db {args.db_command}: error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    """`python -m flashgen.db.cli ACTION ...`: the same as `flashgen db ACTION ...`."""
    parser = argparse.ArgumentParser(
        prog="flashgen db",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
