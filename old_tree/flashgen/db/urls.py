"""Which database to open, and how to name it without leaking its password.

Order: an explicit URL (`--db`, `connect(url)`), else `FLASHGEN_DB_URL`, else a SQLite file
`cache_dir()/tuning.sqlite3` (`XDG_CACHE_HOME` and `FLASHGEN_CACHE_DIR` honoured via
`flashgen.core.paths`). Either may also be a plain file path (no `scheme://`): that is a SQLite file,
so `--db runs/h200.sqlite3` works as users expect instead of failing SQLAlchemy's URL parser. A URL is only ever shown through `mask_url`, and `scrub` removes the
password from error text a driver might echo back.
"""

from __future__ import annotations

import os
import re

from ..core.paths import cache_dir

ENV_VAR = "FLASHGEN_DB_URL"
DEFAULT_FILE = "tuning.sqlite3"
_USERINFO = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@?#]*):(?P<pw>[^@/?#]*)@"
)


def default_url() -> str:
    return f"sqlite:///{cache_dir() / DEFAULT_FILE}"


_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-]*://")


def as_url(text: str) -> str:
    """`text` if it is a URL; a plain path (no `scheme://`) becomes the URL of that SQLite file
    (`~` expanded, made absolute, so the URL means the same file from any working directory)."""
    text = str(text).strip()
    if _SCHEME.match(text):
        return text
    return f"sqlite:///{os.path.abspath(os.path.expanduser(text))}"


def resolve_url(url: str | None = None) -> str:
    if url:
        return as_url(url)
    from_env = os.environ.get(ENV_VAR, "").strip()
    if from_env:
        return as_url(from_env)
    return default_url()


def mask_url(url: str) -> str:
    """`url` with any password replaced by ***, also for URLs SQLAlchemy cannot parse."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(url))


def password_of(url: str) -> str | None:
    match = _USERINFO.search(str(url))
    if not match or not match["pw"]:
        return None
    from urllib.parse import unquote

    return unquote(match["pw"])


def scrub(message: str, url: str) -> str:
    """Error text with the URL's password (raw or percent-decoded) and the URL itself masked."""
    message = str(message).replace(str(url), mask_url(url))
    password = password_of(url)
    raw = _USERINFO.search(str(url))
    for secret in {password, raw["pw"] if raw else None}:
        if secret:
            message = message.replace(secret, "***")
    return mask_url(message)
