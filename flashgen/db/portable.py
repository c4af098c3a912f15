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
               "flashgen_version": "0.1.0", "template_hash": "0123456789abcdef"}}]}
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import NoReturn

from ..config import ALLOWED_WARPS, MAX_BLOCK, MAX_STAGES, MIN_BLOCK, TileConfig
from ..spec import KernelSpec
from .records import MAX_BUCKET, EnvFingerprint, TuningRecord

FORMAT = "flashgen-tuning-db"
VERSION = 1
RECORD_FIELDS = (
    "spec",
    "bucket",
    "config",
    "time_ms",
    "tflops",
    "n_trials",
    "measured",
    "host",
    "created_at",
    "env",
)
CONFIG_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")
ENV_INT_FIELDS = ("sm_count", "smem_optin")
ENV_STR_FIELDS = (
    "gpu_name",
    "capability",
    "triton_version",
    "torch_version",
    "flashgen_version",
    "template_hash",
)


class FormatError(ValueError):
    """A tuning file that is not valid; the message names the record and the field."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(
        value
    )


def _fail(index: int, path: str, why: str) -> NoReturn:
    raise FormatError(f"record {index}: field '{path}': {why}")


def _exact_keys(index: int, path: str, obj, fields) -> None:
    if not isinstance(obj, dict):
        _fail(index, path or "<record>", f"must be an object, got {type(obj).__name__}")
    prefix = f"{path}." if path else ""
    for name in fields:
        if name not in obj:
            _fail(index, prefix + name, "missing")
    for name in obj:
        if name not in fields:
            _fail(index, prefix + str(name), "unknown field")


def _config(index: int, obj) -> TileConfig:
    _exact_keys(index, "config", obj, CONFIG_FIELDS)
    for name in ("block_m", "block_n"):
        value = obj[name]
        ok = _is_int(value) and MIN_BLOCK <= value <= MAX_BLOCK and not value & (value - 1)
        if not ok:
            _fail(
                index,
                f"config.{name}",
                f"must be a power of two in [{MIN_BLOCK}, {MAX_BLOCK}], got {value!r}",
            )
    if not (_is_int(obj["num_warps"]) and obj["num_warps"] in ALLOWED_WARPS):
        _fail(
            index, "config.num_warps", f"must be one of {ALLOWED_WARPS}, got {obj['num_warps']!r}"
        )
    if not (_is_int(obj["num_stages"]) and 1 <= obj["num_stages"] <= MAX_STAGES):
        _fail(
            index,
            "config.num_stages",
            f"must be an int in [1, {MAX_STAGES}], got {obj['num_stages']!r}",
        )
    return TileConfig.from_dict(obj)


def _env(index: int, obj) -> EnvFingerprint:
    _exact_keys(index, "env", obj, ENV_INT_FIELDS + ENV_STR_FIELDS)
    for name in ENV_INT_FIELDS:
        if not (_is_int(obj[name]) and obj[name] > 0):
            _fail(index, f"env.{name}", f"must be a positive int, got {obj[name]!r}")
    for name in ENV_STR_FIELDS:
        if not (isinstance(obj[name], str) and 0 < len(obj[name]) <= 128):
            _fail(index, f"env.{name}", f"must be a non-empty string, got {obj[name]!r}")
    try:
        return EnvFingerprint(**obj)
    except ValueError as exc:
        _fail(index, "env", str(exc))


def _record(index: int, obj) -> TuningRecord:
    _exact_keys(index, "", obj, RECORD_FIELDS)
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
    bucket = obj["bucket"]
    if not (isinstance(bucket, list) and len(bucket) == 2):
        _fail(index, "bucket", f"must be a list of two ints, got {bucket!r}")
    for value in bucket:
        if not (_is_int(value) and 16 <= value <= MAX_BUCKET and not value & (value - 1)):
            _fail(index, "bucket", f"values must be powers of two >= 16, got {value!r}")
    config = _config(index, obj["config"])
    if not (_is_number(obj["time_ms"]) and obj["time_ms"] > 0):
        _fail(index, "time_ms", f"must be a positive number, got {obj['time_ms']!r}")
    if not (_is_number(obj["tflops"]) and obj["tflops"] >= 0):
        _fail(index, "tflops", f"must be a number >= 0, got {obj['tflops']!r}")
    if not (_is_int(obj["n_trials"]) and obj["n_trials"] >= 0):
        _fail(index, "n_trials", f"must be an int >= 0, got {obj['n_trials']!r}")
    if not isinstance(obj["measured"], bool):
        _fail(index, "measured", f"must be true or false, got {obj['measured']!r}")
    if not (isinstance(obj["host"], str) and 0 < len(obj["host"]) <= 255):
        _fail(index, "host", f"must be a non-empty string, got {obj['host']!r}")
    try:
        created = _dt.datetime.fromisoformat(obj["created_at"])
    except (TypeError, ValueError):
        _fail(index, "created_at", f"must be an ISO 8601 time, got {obj['created_at']!r}")
    env = _env(index, obj["env"])
    return TuningRecord(
        spec=spec,
        bucket=(bucket[0], bucket[1]),
        env=env,
        config=config,
        time_ms=float(obj["time_ms"]),
        tflops=float(obj["tflops"]),
        n_trials=obj["n_trials"],
        measured=obj["measured"],
        host=obj["host"],
        created_at=created,
    )


def parse_document(doc) -> list[TuningRecord]:
    """Every record of a parsed JSON document, or FormatError for the first bad one."""
    if not isinstance(doc, dict):
        raise FormatError("a tuning file must be a JSON object")
    if doc.get("format") != FORMAT:
        raise FormatError(f"field 'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise FormatError(
            f"field 'version': unsupported {doc.get('version')!r} (this reads {VERSION})"
        )
    unknown = set(doc) - {"format", "version", "records"}
    if unknown:
        raise FormatError(f"unknown top-level field(s) {sorted(unknown)}")
    records = doc.get("records")
    if not isinstance(records, list):
        raise FormatError("field 'records' must be a list")
    return [_record(i, obj) for i, obj in enumerate(records)]


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
    }


def to_document(records) -> dict:
    return {"format": FORMAT, "version": VERSION, "records": [record_to_json(r) for r in records]}


def dump(records, path) -> int:
    """Write `records` to `path` atomically; returns how many."""
    from ..codegen import write_atomic

    doc = to_document(records)
    write_atomic(Path(path), json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return len(doc["records"])
