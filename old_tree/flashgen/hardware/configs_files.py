"""The measured-configs files of the kernel families (decode, Hopper): where one is, how it is read.

One place, so the families find their files the same way and a bad file is handled the same way
everywhere: it costs speed (the built-in configs run), never a run. What a record means and how
it is validated stays with its family (`flashgen.hardware.decode`, `flashgen.hardware.hopper_tiles`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from .sram import DeviceLimits, device_slug

log = logging.getLogger("flashgen")


def configs_file(env_name: str, family: str, device: DeviceLimits) -> Path | None:
    """The measured-configs JSON of one kernel family for `device`: the file the environment
    variable `env_name` names, else tuning_db/<family>/<gpu>.json shipped in the package or
    beside it in a checkout; None when there is none."""
    explicit = os.environ.get(env_name)
    if explicit:
        return Path(explicit).expanduser()
    package = Path(__file__).resolve().parent.parent
    for base in (package / "tuning_db", package.parent / "tuning_db"):
        path = base / family / f"{device_slug(device)}.json"
        if path.is_file():
            return path
    return None


def read_configs(path: str, fmt: str, family: str, entry) -> dict:
    """{key: config} of a measured-configs file of format `fmt`, `entry(record)` giving each
    record's (key, config) and raising ValueError, KeyError or TypeError for a bad one; {}
    with a warning naming the `family` when the file cannot be read or is not one."""
    try:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("format") != fmt:
            raise ValueError(f"format is not {fmt!r}")
        return dict(entry(rec) for rec in doc["records"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("flashgen: ignoring %s configs file %s: %s", family, path, exc)
        return {}
