"""The package layout's rules (README "Layout"), read from the source so a new module that breaks
them fails here: every module lives in a room, a room imports only the rooms below it (lazy
imports inside functions count too), and `core` imports neither torch nor a database."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "flashgen"

# room -> the flashgen rooms it may import (itself included). "top" is flashgen/__init__, __main__,
# ops, cli.
ALLOWED = {
    "core": {"core"},
    "hardware": {"core", "hardware"},
    "db": {"core", "db"},
    "kernels": {"core", "hardware", "kernels"},
    "runtime": {"core", "hardware", "db", "kernels", "runtime"},
    "tune": {"core", "hardware", "db", "kernels", "runtime", "tune"},
    "compile": {"core", "hardware", "kernels", "runtime", "compile", "top"},
    "bench": {"core", "hardware", "kernels", "runtime", "bench", "top"},
}
TOP_MODULES = {"__init__", "__main__", "ops", "cli"}
# The exception left (README): the `flashgen db` command (wiring, not storage) matches
# FLASHGEN_GPU names against the known GPUs. The launchers take a config and look none up
# (`flashgen.kernels.plans`): no module of `kernels` imports `runtime`.
EXCEPTIONS = {
    ("db/cli.py", "hardware"),
}
HEAVY = ("torch", "triton", "sqlalchemy", "alembic", "optuna")


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if "migrations" not in rel.parts:
            yield rel, ast.parse(path.read_text())


def _flashgen_imports(rel: Path, tree: ast.Module):
    """(line, room) of every flashgen import in the module, resolved to the room it reaches."""
    package = ["flashgen", *rel.parts[:-1]]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                base += node.module.split(".") if node.module else []
            else:
                base = (node.module or "").split(".")
            if base[0] != "flashgen":
                continue
            targets = [[*base, a.name] for a in node.names] if len(base) == 1 else [base]
        elif isinstance(node, ast.Import):
            targets = [a.name.split(".") for a in node.names if a.name.startswith("flashgen.")]
        else:
            continue
        for target in targets:
            room = target[1]
            if room in TOP_MODULES or room == "__version__":
                room = "top"
            yield node.lineno, room


def test_every_module_lives_in_a_room():
    rooms = set(ALLOWED)
    stray = [
        str(rel)
        for rel, _ in _modules()
        if (len(rel.parts) == 1 and rel.stem not in TOP_MODULES)
        or (len(rel.parts) > 1 and rel.parts[0] not in rooms)
    ]
    assert not stray, f"modules outside the rooms of README 'Layout': {stray}"


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_rooms_below(room):
    wrong = []
    for rel, tree in _modules():
        if rel.parts[0] != room or len(rel.parts) == 1:
            continue
        for line, target in _flashgen_imports(rel, tree):
            if target not in ALLOWED[room] and (rel.as_posix(), target) not in EXCEPTIONS:
                wrong.append(f"flashgen/{rel.as_posix()}:{line} imports flashgen.{target}")
    assert not wrong, "\n".join(wrong)


def test_core_imports_no_heavy_package_at_import_time():
    heavy = []
    for rel, tree in _modules():
        if rel.parts[0] != "core":
            continue
        for node in tree.body:  # module level only: a lazy import inside a function is allowed
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            heavy += [f"{rel}: {n}" for n in names if n.split(".")[0] in HEAVY]
    assert not heavy, heavy


def test_readme_layout_table_names_every_module():
    """A newcomer reads the rooms' contents from README's layout table: every module of a room
    is named (as `name.py`) in that room's row, the top-level ones in the row of
    `flashgen/__init__.py`, so a module added without a line there fails here."""
    readme = (PACKAGE.parent / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        if line.startswith("| `flashgen/"):
            head = line.split("`")[1]  # "flashgen/kernels/" or "flashgen/__init__.py"
            rows["top" if head.endswith(".py") else head.split("/")[1]] = line
    unnamed = []
    for rel, _ in _modules():
        room = rel.parts[0] if len(rel.parts) > 1 else "top"
        if rel.name == "__init__.py" and room != "top":
            continue
        if not re.search(rf"[`/]{re.escape(rel.name)}`", rows.get(room, "")):
            unnamed.append(f"flashgen/{rel.as_posix()}")
    assert not unnamed, f"modules README's layout table does not name: {unnamed}"


def test_python_dash_m_runs_the_command():
    """`python -m flashgen` is the `flashgen` command: its help, and an unknown command's error
    and exit status 2, as the installed script gives them."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    ok = subprocess.run([sys.executable, "-m", "flashgen", "--help"], capture_output=True,
                        text=True, env=env, timeout=120)  # fmt: skip
    assert ok.returncode == 0 and "usage: flashgen" in ok.stdout and "tune" in ok.stdout, ok
    bad = subprocess.run([sys.executable, "-m", "flashgen", "bogus"], capture_output=True,
                         text=True, env=env, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "invalid choice: 'bogus'" in bad.stderr, bad
