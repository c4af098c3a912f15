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

Version 2 added "impl" and "impl_ratio" (which implementation won against PyTorch's SDPA
backends, `TuningRecord`); both are optional, and version 1 files (which have neither) import
as impl "flashgen" with no ratio, i.e. "not compared".
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
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


class FormatError(ValueError):
    """A tuning file that is not valid; the message names the record and the field."""


def _fail(index: int, path: str, why: str) -> NoReturn:
    raise FormatError(f"record {index}: field '{path}': {why}")


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


def _build(index: int, path: str, cls, obj, fields):
    """`cls(**obj)` with exactly `fields`; the dataclass validates every value (the same rules
    as for rows read from the database), and its `FieldError` names the field."""
    _exact_keys(index, path, obj, fields)
    try:
        return cls(**obj)
    except FieldError as exc:
        _fail(index, f"{path}.{exc.field}", str(exc))


def _record(index: int, obj, version: int) -> TuningRecord:
    optional = OPTIONAL_FIELDS if version >= 2 else ()
    fields = (
        RECORD_FIELDS
        if version >= 2
        else tuple(f for f in RECORD_FIELDS if f not in OPTIONAL_FIELDS)
    )
    _exact_keys(index, "", obj, fields, optional)
    try:
        spec = KernelSpec.from_uri(obj["spec"]) if isinstance(obj["spec"], str) else None
    except ValueError:
        spec = None
    if spec is None:
        _fail(
            index,
            "spec",
            f"must be a kernel uri like 'attn_fwd_d64_causal_f16', got {obj['spec']!r}",
        )
    config = _build(index, "config", TileConfig, obj["config"], CONFIG_FIELDS)
    env = _build(index, "env", EnvFingerprint, obj["env"], ENV_FIELDS)
    try:
        created = _dt.datetime.fromisoformat(obj["created_at"])
    except (TypeError, ValueError):
        _fail(index, "created_at", f"must be an ISO 8601 time, got {obj['created_at']!r}")
    values = {
        k: obj[k] for k in fields if k in obj and k not in ("spec", "config", "env", "created_at")
    }
    try:
        return TuningRecord(spec=spec, config=config, env=env, created_at=created, **values)
    except FieldError as exc:
        _fail(index, exc.field, str(exc))


def parse_document(doc) -> list[TuningRecord]:
    """Every record of a parsed JSON document, or FormatError for the first bad one."""
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
    return [_record(i, obj, version) for i, obj in enumerate(records)]


def load(path) -> list[TuningRecord]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise FormatError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormatError(f"{path} is not valid JSON: {exc}") from exc
    return parse_document(doc)


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
