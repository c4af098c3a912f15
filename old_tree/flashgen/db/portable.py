"""The portable JSON form of tuning records: `flashgen db export/import` and `tuning_db/*.json`.

A file is data from somewhere else, so it is validated completely before anything is used:
exact field names (missing or unknown fields refused), exact JSON types (no strings or booleans
where a number belongs), and every config value inside the space `TileConfig` allows. The first
problem raises `FormatError` naming the record index and the field; callers write nothing
unless the whole file parsed.

    {"format": "flashgen-tuning-db", "version": 1, "records": [
      {"spec": "attn_fwd_d128_causal_f16", "bucket": [1024, 1024],
       "config": {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3},
       "time_ms": 0.412, "tflops": 312.5, "n_trials": 40, "measured": true,
       "host": "node17", "created_at": "2026-11-29T09:12:00+00:00",
       "env": {"gpu_name": "NVIDIA H200", "capability": "9.0", "sm_count": 132,
               "smem_optin": 232448, "triton_version": "3.6.0", "torch_version": "2.11.0",
               "flashgen_version": "0.1.0", "template_hash": "0123456789abcdef"},
       "impl": "sdpa_cudnn", "impl_ratio": 1.12}]}

Text is checked too: a string holding a control character (an ANSI escape would drive the
terminal of whoever runs `flashgen db show`; a NUL byte is stored by SQLite but refused by
PostgreSQL) is refused, naming the record and the field, and so is JSON nested deeper than any
record can be (Python's parser would fail with a RecursionError).

Version 2 added "impl" and "impl_ratio" (which implementation won against PyTorch's SDPA
backends, `TuningRecord`); both are optional, and version 1 files (which have neither) import
as impl "flashgen" with no ratio, i.e. "not compared".
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import unicodedata
from pathlib import Path
from typing import NoReturn

from ..core.config import FieldError, TileConfig
from ..core.spec import KernelSpec
from .records import EnvFingerprint, TuningRecord

FORMAT = "flashgen-tuning-db"
VERSION = 2
READS = (1, 2)
RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(TuningRecord))
OPTIONAL_FIELDS = ("impl", "impl_ratio")
CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(TileConfig))
ENV_FIELDS = tuple(f.name for f in dataclasses.fields(EnvFingerprint))


MAX_DEPTH = 16  # a valid file is 4 levels deep (document, records, record, env/config)
# Whether a JSON text may hold a control character in a string: raw C1/DEL characters, or an
# escape of a C0/C1/DEL one. False alarms (an escaped backslash before "n") only cost the exact
# per-string check; a text without a match cannot hold one (raw C0 characters are not JSON).
_RAW_CONTROL = re.compile("[\x7f-\x9f]")
_ESCAPED_CONTROL = re.compile(r"\\(?:[bfnrt]|u00[0-189][0-9a-fA-F]|u007[fF])")


def _may_hold_control(text: str) -> bool:
    if "\x7f" in text or (not text.isascii() and _RAW_CONTROL.search(text)):
        return True
    return _ESCAPED_CONTROL.search(text) is not None


_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:]')


class FormatError(ValueError):
    """A tuning file that is not valid; the message names the record and the field."""


def printable(text: str) -> str:
    """`text` with control characters written as escapes (ESC -> \\x1b), for terminals."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def _fail(index: int, path: str, why: str) -> NoReturn:
    raise FormatError(f"record {index}: field '{printable(path)}': {why}")


def _check_text(index: int, record) -> None:
    """Refuse control characters in every string (keys included) of a record, and nesting
    deeper than any valid record has (an explicit stack: no recursion to exhaust)."""
    stack = [("", record, 0)]
    while stack:
        path, value, depth = stack.pop()
        if depth > MAX_DEPTH - 2:
            _fail(index, path or "<record>", f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                _check_string(index, where, key)
                stack.append((where, item, depth + 1))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        else:
            _check_string(index, path, value)


_NESTED = ("config", "env", "bucket")


def _check_shape(index: int, obj) -> None:
    """Only `config`, `env` (objects of single values) and `bucket` (a list of them) may nest:
    anything else nested is refused here, before a message could print it (or its repr could
    recurse through thousands of levels)."""
    if not isinstance(obj, dict):
        return  # _exact_keys names it
    for name, value in obj.items():
        if name in _NESTED:
            items = value.values() if isinstance(value, dict) else value
            if isinstance(value, (dict, list)) and any(type(v) in (dict, list) for v in items):
                pairs = value.items() if isinstance(value, dict) else enumerate(value)
                where, item = next((k, v) for k, v in pairs if type(v) in (dict, list))
                path = f"{name}.{where}" if isinstance(value, dict) else f"{name}[{where}]"
                _fail(index, path, f"must be a single value, got {_kind(item)}")
        elif type(value) in (dict, list):
            _fail(index, name, f"must be a single value, got {_kind(value)}")


def _kind(value) -> str:
    return "an object" if isinstance(value, dict) else "an array"


def _check_string(index: int, path: str, value) -> None:
    if not isinstance(value, str) or value.isprintable():
        return
    bad = next((ch for ch in value if unicodedata.category(ch) == "Cc"), None)
    if bad is None:  # unprintable but harmless (e.g. a non-breaking space)
        return
    offset = value.index(bad)
    if bad == "\0":
        why = f"contains a NUL byte at offset {offset} (PostgreSQL cannot store it)"
    else:
        why = (f"contains the control character {printable(bad)} at offset {offset} "
               "(e.g. an ANSI terminal escape)")  # fmt: skip
    _fail(index, path or "<record>", why)


def _too_deep(text: str) -> str:
    """Where the document first nests deeper than MAX_DEPTH: record index and field, read by a
    flat scan of the JSON tokens (the recursive parser already failed on it)."""
    depth, record, field, top_key, last, in_records = 0, -1, "", "", "", False
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth == 2 and top_key == "records" and token == "[":
                in_records = True
            elif depth == 3 and in_records and token == "{":
                record, field = record + 1, ""
            if depth > MAX_DEPTH:
                if record < 0:
                    return f"field '{printable(top_key)}': nested deeper than {MAX_DEPTH} levels"
                return (f"record {record}: field '{printable(field or '<record>')}': nested "
                        f"deeper than {MAX_DEPTH} levels (a record's values are at most 2 deep)")  # fmt: skip
        elif token in "]}":
            depth -= 1
            if depth == 1:
                in_records = False
        elif token == ":":
            if depth == 1:
                top_key = last
            elif depth == 3 and in_records:
                field = last
        else:
            try:
                last = json.loads(token)
            except ValueError:
                last = token
    return f"nested deeper than {MAX_DEPTH} levels"


def _exact_keys(index: int, path: str, obj, fields, optional=()) -> None:
    if not isinstance(obj, dict):
        _fail(index, path or "<record>", f"must be an object, got {type(obj).__name__}")
    prefix = f"{path}." if path else ""
    for name in fields:
        if name not in obj and name not in optional:
            _fail(index, prefix + name, "missing")
    for name in obj:
        if name not in fields:
            _fail(index, prefix + str(name), "unknown field")


def _build(index: int, path: str, cls, obj, fields, cache: dict | None = None):
    """`cls(**obj)` with exactly `fields`; the dataclass validates every value (the same rules
    as for rows read from the database), and its `FieldError` names the field.

    `cache` maps an object already built to its value: a file repeats a few environments and
    configs thousands of times. The key holds each value's type, so 64, 64.0 and true never
    share an entry (only the first passes validation)."""
    key = None
    if cache is not None and isinstance(obj, dict):
        key = (path, *((k, type(v), v) for k, v in obj.items()))
        built = cache.get(key)
        if built is not None:
            return built
    _exact_keys(index, path, obj, fields)
    try:
        built = cls(**obj)
    except FieldError as exc:
        _fail(index, f"{path}.{exc.field}", str(exc))
    if key is not None:
        cache[key] = built
    return built


def _record(
    index: int, obj, version: int, check_text: bool = True, cache: dict | None = None
) -> TuningRecord:
    optional = OPTIONAL_FIELDS if version >= 2 else ()
    fields = (
        RECORD_FIELDS
        if version >= 2
        else tuple(f for f in RECORD_FIELDS if f not in OPTIONAL_FIELDS)
    )
    _check_shape(index, obj)
    if check_text:
        _check_text(index, obj)
    _exact_keys(index, "", obj, fields, optional)
    cache = {} if cache is None else cache
    spec = cache.get(("spec", obj["spec"])) if isinstance(obj["spec"], str) else None
    if spec is None:
        try:
            spec = KernelSpec.from_uri(obj["spec"]) if isinstance(obj["spec"], str) else None
        except ValueError:
            spec = None
        if spec is not None:
            cache[("spec", obj["spec"])] = spec
    if spec is None:
        _fail(
            index,
            "spec",
            f"must be a kernel uri like 'attn_fwd_d64_causal_f16', got {obj['spec']!r}",
        )
    config = _build(index, "config", TileConfig, obj["config"], CONFIG_FIELDS, cache)
    env = _build(index, "env", EnvFingerprint, obj["env"], ENV_FIELDS, cache)
    created = (
        cache.get(("created_at", obj["created_at"])) if isinstance(obj["created_at"], str) else None
    )
    if created is None:
        try:
            created = _dt.datetime.fromisoformat(obj["created_at"])
        except (TypeError, ValueError):
            _fail(index, "created_at", f"must be an ISO 8601 time, got {obj['created_at']!r}")
        cache[("created_at", obj["created_at"])] = created
    values = {
        k: obj[k] for k in fields if k in obj and k not in ("spec", "config", "env", "created_at")
    }
    try:
        return TuningRecord(spec=spec, config=config, env=env, created_at=created, **values)
    except FieldError as exc:
        _fail(index, exc.field, str(exc))


def parse_document(doc, *, check_text: bool = True, consume: bool = False) -> list[TuningRecord]:
    """Every record of a parsed JSON document, or FormatError for the first bad one.
    `check_text=False` skips the control-character scan of every string, for a document
    whose JSON text was shown to hold none (`load`); `consume=True` empties the document's
    record list while reading it (the caller's copy is not needed afterwards)."""
    if not isinstance(doc, dict):
        raise FormatError("a tuning file must be a JSON object")
    if doc.get("format") != FORMAT:
        raise FormatError(f"field 'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    version = doc.get("version")
    if isinstance(version, bool) or version not in READS:
        raise FormatError(
            f"field 'version': unsupported {version!r} (this reads {', '.join(map(str, READS))})"
        )
    unknown = set(doc) - {"format", "version", "records"}
    if unknown:
        raise FormatError(f"unknown top-level field(s) {sorted(unknown)}")
    records = doc.get("records")
    if not isinstance(records, list):
        raise FormatError("field 'records' must be a list")
    cache: dict = {}
    out = []
    for i, obj in enumerate(records):
        out.append(_record(i, obj, version, check_text, cache))
        if consume:
            records[i] = None  # the parsed JSON goes as the records come (a 200k-record file)
    return out


def load(path) -> list[TuningRecord]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:  # JSON files are UTF-8; say which file and where
        raise FormatError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise FormatError(f"{path}: {_too_deep(text)}") from None
    check_text = _may_hold_control(text)
    del text  # a large file: keep one copy of it in memory, not two
    return parse_document(doc, check_text=check_text, consume=True)


def record_to_json(rec: TuningRecord) -> dict:
    return {
        "spec": rec.spec.uri(),
        "bucket": [rec.bucket[0], rec.bucket[1]],
        "config": rec.config.as_dict(),
        "time_ms": rec.time_ms,
        "tflops": rec.tflops,
        "n_trials": rec.n_trials,
        "measured": rec.measured,
        "host": rec.host,
        "created_at": rec.created_at.isoformat(),
        "env": rec.env.as_dict(),
        "impl": rec.impl,
        "impl_ratio": rec.impl_ratio,
    }


def to_document(records) -> dict:
    return {"format": FORMAT, "version": VERSION, "records": [record_to_json(r) for r in records]}


def dump(records, path) -> int:
    """Write `records` to `path` atomically; returns how many."""
    from ..core.paths import write_atomic

    doc = to_document(records)
    write_atomic(Path(path), json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return len(doc["records"])
