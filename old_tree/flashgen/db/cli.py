"""Show, export, import and merge tuning databases.

  flashgen db show    [--db URL]        table of the best config per spec, bucket and GPU, and
                                        which implementation won (flashgen or an SDPA backend)
  flashgen db pending [--db URL]        shapes seen at run time that have no exact record
  flashgen db export FILE [--db URL]    portable JSON (the tuning_db/ format); show and export
                                        take --gpu NAME and --measured-only
  flashgen db import FILE [--db URL]    validate the whole file, then keep-best upsert each record
  flashgen db merge URL   [--db URL]    keep-best upsert of every record of another database

--db defaults to FLASHGEN_DB_URL, else ~/.cache/flashgen/tuning.sqlite3; a plain path is a
SQLite file. show, pending, export and merge's source only read: a missing database is an
error for them, and they never create one. --gpu takes the GPU's name as stored ('NVIDIA H200')
or a FLASHGEN_GPU name ('nvidia-h200'). Passwords in URLs are never printed. Any fault (locked,
read-only, malformed, missing, unreachable) is one line naming the database, the problem and
what to do, with exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
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
        "--gpu",
        metavar="NAME",
        help="only records tuned on this GPU: its name ('NVIDIA H200') or a FLASHGEN_GPU name "
        "('nvidia-h200')",
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
    """Rows with control characters escaped: strings from a database (or an imported file)
    must not drive the terminal (colours, cursor moves, a cleared screen, a forged line)."""
    from .portable import printable

    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def gpu_matches(stored_name: str, wanted: str) -> bool:
    """Whether a record's GPU name is the GPU `wanted` names: the same name (any case), or the
    FLASHGEN_GPU name (`flashgen.hardware.sram.KNOWN_GPUS` key) of that model."""
    from ..hardware.sram import KNOWN_GPUS, DeviceLimits, device_slug

    wanted = wanted.strip().lower()
    if stored_name.lower() == wanted:
        return True
    if wanted not in KNOWN_GPUS:
        return False
    return device_slug(DeviceLimits(stored_name, (0, 0), 1, 1)) == wanted


def _selected(db, args) -> list:
    """Records after the --gpu / --measured-only filters."""
    records = db.records()
    if getattr(args, "gpu", None):
        records = [r for r in records if gpu_matches(r.env.gpu_name, args.gpu)]
    if getattr(args, "measured_only", False):
        records = [r for r in records if r.measured]
    return records


def _show(db, args) -> int:
    from ..core.impls import impl_label

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


@contextlib.contextmanager
def _progress(total: int, what: str):
    """A progress bar on stderr while records are written, only when stderr is a terminal (a
    log file or a pipe gets the summary line alone); yields the `progress(n)` callback."""
    from tqdm import tqdm

    bar = tqdm(total=total, desc=what, unit="rec", file=sys.stderr, leave=False,
               disable=total == 0 or not sys.stderr.isatty(), dynamic_ncols=True)  # fmt: skip
    try:
        yield bar.update
    finally:
        bar.close()


def _write(db, records, what: str) -> int:
    """Keep-best upsert of `records` into `db` with a progress bar named `what` (import and
    merge write the same way); returns how many were written."""
    with _progress(len(records), what) as step:
        return db.upsert_many(records, progress=step)


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
        readonly = args.db_command in ("show", "pending", "export")
        if args.db_command == "merge":  # the source must exist before the target is created
            connect(args.source, readonly=True).close()
        db = connect(args.db, readonly=readonly)
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
                wins = _write(db, records, "import")
                print(
                    f"imported {args.file} into {db.url_safe}: {len(records)} record(s), "
                    f"{wins} written, {len(records) - wins} kept (stored one as good or better)"
                )
                return 0
            source = connect(args.source, readonly=True)
            try:
                records = source.records()
            finally:
                source.close()
            wins = _write(db, records, "merge")
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
