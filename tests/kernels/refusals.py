"""The refusal check the kernel tests repeat: `flashgen.attention` given one bad argument raises
a ValueError whose message names that argument (before any kernel runs).

A helper module, not a test file: test_softcap, test_window, test_padding and test_attn_mask
parametrise their bad arguments and call `assert_refused` for each, so a refusal is checked the
same way everywhere (same exception type, message matched as a regular expression).
"""

from __future__ import annotations

import pytest

from flashgen.ops import attention


def assert_refused(qkv, kwargs: dict, message: str) -> None:
    """`attention(q, k, v, **kwargs)` raises ValueError matching `message` (re.search)."""
    q, k, v = qkv
    with pytest.raises(ValueError, match=message):
        attention(q, k, v, **kwargs)
