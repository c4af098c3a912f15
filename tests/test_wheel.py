"""The wheel ships the templates: build it, install it into a fresh venv, render from there.

Rendering needs only jinja2, so the fresh venv gets the wheel with --no-deps plus jinja2 and
markupsafe (no torch/triton download). The render runs from a directory outside the checkout
with a clean PYTHONPATH, so the templates can only come from inside the installed package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashgen.core.spec import KernelSpec
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.hardware.tiles import default_config

ROOT = Path(__file__).resolve().parents[1]

_RENDER = """
import json
import flashgen, flashgen.core.paths
from flashgen.kernels.codegen import render
from flashgen.core.spec import KernelSpec
from flashgen.hardware.sram import KNOWN_GPUS
from flashgen.hardware.tiles import default_config
source = render(KernelSpec(80, True, "bfloat16"))
print(json.dumps({
    "package": flashgen.__file__,
    "templates": str(flashgen.core.paths.templates_dir()),
    "ok": "def attn_fwd(" in source and "HEAD_DIM = tl.constexpr(80)" in source,
    "defaults": [
        default_config(KernelSpec(*a), d).short() for a in SPEC_ARGS for d in KNOWN_GPUS.values()
    ],
}))
"""
# Specs whose untuned defaults come from the rows of flashgen/hardware/tile_defaults.csv.
_SPEC_ARGS = [
    (d, c, "bfloat16", x) for d in (64, 128) for c in (False, True) for x in ("fwd", "bwd")
]


def _run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.slow
def test_wheel_installs_and_renders_from_its_own_templates(tmp_path):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)])
    wheels = list(dist.glob("flashgen-*.whl"))
    assert len(wheels) == 1

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q", "--no-deps"]
    _run([*pip, str(wheels[0]), "jinja2", "markupsafe"])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["FLASHGEN_CACHE_DIR"] = str(tmp_path / "cache")
    info = json.loads(
        _run([str(py), "-c", f"SPEC_ARGS = {_SPEC_ARGS!r}\n{_RENDER}"], cwd=elsewhere, env=env)
    )
    package = Path(info["package"]).resolve().parent
    templates = Path(info["templates"]).resolve()
    assert info["ok"]
    assert venv.resolve() in package.parents, f"flashgen imported from {package}"
    assert templates == package / "templates"
    assert ROOT not in templates.parents
    # The measured configs the run time reads from inside the package (flashgen.hardware.configs_files'
    # configs_file looks in <package>/tuning_db first): portable records, the Hopper family's and the decode kernels'.
    for shipped in ("nvidia-h200.json", "hopper/nvidia-h200.json", "decode/nvidia-h200.json"):
        assert (package / "tuning_db" / shipped).is_file(), shipped
    # The untuned defaults table (flashgen.hardware.tiles reads it at import): the installed
    # package gives the same defaults as this checkout.
    assert (package / "hardware" / "tile_defaults.csv").is_file()
    want = [
        default_config(KernelSpec(*a), d).short() for a in _SPEC_ARGS for d in KNOWN_GPUS.values()
    ]
    assert info["defaults"] == want
