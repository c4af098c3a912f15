"""`flashgen.core.environ.set_env`: a variable set for a block, then exactly as before (unset if
it was unset), also when the block raises; None leaves it alone."""

from __future__ import annotations

import os

import pytest

from flashgen.core.environ import set_env

NAME = "FLASHGEN_TEST_SET_ENV"


def test_set_inside_and_restored_after(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)
    with set_env(NAME, "a"):
        assert os.environ[NAME] == "a"
    assert NAME not in os.environ
    monkeypatch.setenv(NAME, "before")
    with pytest.raises(RuntimeError), set_env(NAME, "b"):
        assert os.environ[NAME] == "b"
        raise RuntimeError
    assert os.environ[NAME] == "before"


def test_none_leaves_it_alone(monkeypatch):
    monkeypatch.setenv(NAME, "kept")
    with set_env(NAME, None):
        assert os.environ[NAME] == "kept"
        os.environ[NAME] = "changed inside"
    assert os.environ[NAME] == "changed inside"
