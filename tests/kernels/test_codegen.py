"""Code generation: rendering, strictness, the hashed cache file, concurrency, the CLI."""

from __future__ import annotations

import argparse
import ast
import hashlib
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest

from flashgen.core.spec import KernelSpec
from flashgen.kernels import cli as kernel_cli
from flashgen.kernels import codegen

SPECS = [
    KernelSpec(64, False, "float16"),
    KernelSpec(80, True, "bfloat16"),
    KernelSpec(128, True, "float32"),
    KernelSpec(256, False, "bfloat16"),
    KernelSpec(16, True, "float16"),
]


def _render_with(spec: KernelSpec, **overrides) -> str:
    context = {**codegen.template_context(spec), **overrides}
    return codegen._environment().get_template("attn_fwd.py.jinja").render(**context)


@pytest.mark.parametrize("spec", SPECS, ids=[s.uri() for s in SPECS])
def test_render_specialises_on_the_spec(spec):
    source = codegen.render(spec)
    tree = ast.parse(source)
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["attn_fwd", "attn_fwd_tma"]
    assert f"HEAD_DIM = tl.constexpr({spec.head_dim})" in source
    assert f"BLOCK_D = tl.constexpr({spec.block_d})" in source
    assert f"# Kernel: {spec.uri()}" in source
    # Causal structure is chosen at render time: only causal kernels compare key and row indices.
    assert ("offs_n[None, :] <= offs_m[:, None]" in source) == spec.causal
    # Head-dim masks only where the head dim is padded.
    assert ("d_mask" in source) == (spec.head_dim != spec.block_d)
    dots = [line for line in source.splitlines() if "tl.dot(" in line]
    assert len(dots) == 8  # two per loop, two loops per kernel, two kernels
    assert all(('input_precision="ieee"' in d) == (spec.dtype == "float32") for d in dots)
    # The steady-state loop (first loop) has no masks at all when the head dim is a power of 2;
    # in the TMA kernel never (the descriptor zero-fills the padded head dim).
    loops = source.split("for start_n in range(0, full_end, BLOCK_N):")
    assert len(loops) == 3
    ptr_loop, tma_loop = (part.split("for ")[0] for part in loops[1:])
    assert "mask" not in tma_loop and "tl.where" not in tma_loop
    if spec.head_dim == spec.block_d:
        assert "mask" not in ptr_loop and "tl.where" not in ptr_loop


def test_bf16_interpreter_rendering_upcasts_and_says_so():
    spec = KernelSpec(64, True, "bfloat16")
    real = _render_with(spec, interpret=False)
    interp = _render_with(spec, interpret=True)
    assert ".to(tl.float32)" not in real and "p.to(tl.bfloat16)" in real
    assert interp.count(".to(tl.float32)") >= 3 and "p.to(tl.float32)" in interp
    assert "acc.to(tl.bfloat16)" in interp  # output still written as bf16
    fp16 = _render_with(KernelSpec(64, True, "float16"), interpret=True)
    assert ".to(tl.float32)" not in fp16


@pytest.mark.parametrize("missing", sorted(codegen.template_context(SPECS[1])))
def test_missing_template_variable_is_an_error(missing):
    """StrictUndefined: a template parameter that is not supplied fails loudly."""
    context = codegen.template_context(KernelSpec(80, True, "bfloat16"))
    context["interpret"] = True
    del context[missing]
    template = codegen._environment().get_template("attn_fwd.py.jinja")
    with pytest.raises(jinja2.UndefinedError):
        template.render(**context)


def test_environment_is_strict():
    with pytest.raises(jinja2.UndefinedError):
        codegen._environment().from_string("{{ not_a_parameter }}").render()


_LOAD_SCRIPT = """
import sys
from flashgen.kernels.codegen import load, kernel_path, render
from flashgen.core.spec import KernelSpec
spec = KernelSpec(96, True, "float16")
module = load(spec)
assert hasattr(module, "attn_fwd")
print(kernel_path(spec, render(spec)))
"""


def test_load_writes_hashed_file_into_cache_dir(tmp_path):
    env = {**os.environ, "FLASHGEN_CACHE_DIR": str(tmp_path), "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.strip())
    assert path.parent == tmp_path / "kernels"
    files = list((tmp_path / "kernels").iterdir())
    assert files == [path]  # no temporary files left behind
    text = path.read_text()
    assert text == codegen.render(KernelSpec(96, True, "float16"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    assert path.name == f"attn_fwd_d96_causal_f16_{digest}.py"


def _hammer(args):
    """One process: write the same kernel file many times, read it back between writes."""
    cache, rounds = args
    os.environ["FLASHGEN_CACHE_DIR"] = cache
    from flashgen.core.spec import KernelSpec as Spec
    from flashgen.kernels import codegen as cg

    spec = Spec(80, False, "bfloat16")
    source = cg.render(spec)
    path = cg.kernel_path(spec, source)
    torn = 0
    for _ in range(rounds):
        cg.write_atomic(path, source)
        if path.read_text() != source:
            torn += 1
    module = cg.load(spec)
    return torn, str(path), hasattr(module, "attn_fwd")


def test_concurrent_rendering_leaves_one_intact_file(tmp_path):
    cache = str(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_hammer, [(cache, 200)] * 4)
    assert [torn for torn, _, _ in results] == [0, 0, 0, 0]
    assert all(ok for _, _, ok in results)
    paths = {p for _, p, _ in results}
    assert len(paths) == 1
    files = list((tmp_path / "kernels").iterdir())
    assert [str(f) for f in files] == list(paths)
    assert files[0].read_text() == codegen.render(KernelSpec(80, False, "bfloat16"))


def test_kernel_subcommand_prints_source(capsys):
    parser = argparse.ArgumentParser()
    kernel_cli.add_arguments(parser)
    assert (
        kernel_cli.run(parser.parse_args(["--head-dim", "128", "--causal", "--dtype", "bfloat16"]))
        == 0
    )
    out = capsys.readouterr().out
    assert out == codegen.render(KernelSpec(128, True, "bfloat16"))


def test_flashgen_kernel_cli(tmp_path):
    """The user's command: `flashgen kernel --head-dim 128 --causal --dtype bfloat16`."""
    env = {**os.environ, "FLASHGEN_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flashgen.cli",
            "kernel",
            "--head-dim",
            "128",
            "--causal",
            "--dtype",
            "bfloat16",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "def attn_fwd(" in result.stdout
    assert "HEAD_DIM = tl.constexpr(128)" in result.stdout
    assert "# Kernel: attn_fwd_d128_causal_bf16" in result.stdout


def test_flashgen_kernel_prints_window_and_softcap_variants(capsys):
    """`flashgen kernel --window --softcap` prints those kernels; a bad spec is one line, exit 2."""
    import argparse

    from flashgen.kernels import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--head-dim", "64", "--window", "--softcap", "--direction", "bwd"])
    assert cli.run(args) == 0
    out = capsys.readouterr().out
    assert out == codegen.render(KernelSpec(64, False, "float16", "bwd", True, True))
    assert "WIN_LEFT, WIN_RIGHT," in out and "softcap_raw," in out
    assert cli.run(parser.parse_args(["--head-dim", "300"])) == 2
    assert "head_dim must be between" in capsys.readouterr().err
    assert cli.run(parser.parse_args(["--head-dim", "64", "--window", "--family", "decode"])) == 2
    assert "without window or softcap" in capsys.readouterr().err


def test_flashgen_kernel_prints_mask_and_alibi_kernels_of_every_family(capsys):
    """`--attn-mask bool|add` prints the mask-tensor kernels; ALiBi and masks print for the
    families that have them (the Hopper forward and backward too); a family without the
    combination is one line naming the kernel, exit 2, never a traceback."""
    import argparse

    from flashgen.kernels import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)

    def run(*argv):
        code = cli.run(parser.parse_args(["--head-dim", "64", *argv]))
        return code, capsys.readouterr()

    code, printed = run("--attn-mask", "add", "--causal", "--dtype", "bfloat16")
    assert code == 0
    assert printed.out == codegen.render(KernelSpec(64, True, "bfloat16", attn_mask="add"))
    code, printed = run("--attn-mask", "bool", "--lengths", "--direction", "bwd")
    assert code == 0
    assert "# Kernel: attn_bwd_d64_fulllenbmask_f16" in printed.out
    if codegen_has_gluon():
        code, printed = run("--alibi", "--family", "hopper")
        assert code == 0 and "Slopes, stride_sb," in printed.out
        code, printed = run("--alibi", "--family", "hopper_bwd", "--direction", "bwd")
        assert code == 0 and "# Kernel: attn_bwd_hopper_d64_fullalibi_f16" in printed.out
    code, printed = run("--alibi", "--attn-mask", "bool", "--family", "decode")
    assert code == 0 and "# Kernel: attn_decode_d64_fullbmaskalibi_f16" in printed.out
    assert "Slopes, stride_sb," in printed.out and "row_shift" in printed.out
    for argv, said in (
        (("--alibi", "--attn-mask", "add", "--family", "decode"), "the decode family has no"),
        (("--alibi", "--family", "onepass", "--direction", "bwd"), "the one-pass backward has no"),
        (("--packed", "--family", "hopper"), "packed sequences have portable kernels only"),
    ):
        code, printed = run(*argv)
        assert code == 2 and printed.out == ""
        assert printed.err.startswith("flashgen kernel: ") and said in printed.err
        assert printed.err.count("\n") == 1
    with pytest.raises(SystemExit):  # argparse names the choices
        parser.parse_args(["--head-dim", "64", "--attn-mask", "sum"])


def codegen_has_gluon() -> bool:
    """Whether this Triton's Gluon renders the Hopper families (else their rows are skipped)."""
    from flashgen.kernels.hopper import gluon_api

    return gluon_api()[0] is not None
