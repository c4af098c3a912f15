"""What the Hopper (Gluon) kernel tests share: whether this Triton has Gluon and can compile it
for sm_90 ahead of time, whether an sm_90 GPU is here (the skip marks built on both), compiling
a list of cases in a child process, and running `flashgen kernel`.

A helper module, not a test file: tests/kernels/test_hopper.py (forward family) and
tests/kernels/test_hopper_bwd.py (backward kind) import it, so the two families' CPU checks
set up the compiler the same way and skip for the same reasons.
"""

from __future__ import annotations

import argparse

import aot_compile
import pytest
import torch

from flashgen.kernels import hopper


def aot_reason(api_reason: str | None) -> str | None:
    """None when Gluon kernels can be compiled for sm_90 on this machine, else why not
    (`api_reason`: `flashgen.kernels.hopper.gluon_api()`'s reason, None when it has the API)."""
    if api_reason is not None:
        return api_reason
    try:
        from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401
    except ImportError as exc:
        return f"this Triton cannot compile Gluon ahead of time ({exc})"
    return None


API, API_REASON = hopper.gluon_api()
AOT_REASON = aot_reason(API_REASON)
needs_gluon = pytest.mark.skipif(API is None, reason=f"no usable Gluon: {API_REASON}")
ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_sm90 = pytest.mark.skipif(not ON_SM90, reason="needs an sm_90 GPU (H100/H200)")


def on_sm90(test):
    """The marks of a Hopper test that runs kernels: `gpu`, and skipped without an sm_90 GPU or
    without a usable Gluon (the three marks every such test carried, in the same order)."""
    return pytest.mark.gpu(needs_sm90(needs_gluon(test)))


def compile_in_child(script: str, cases) -> dict:
    """Run `script` (python source reading the JSON of `cases` from argv[1] and printing one
    JSON object) in a child process without TRITON_INTERPRET
    (`aot_compile.run_without_interpreter`): Gluon's jit helpers imported under the
    interpreter cannot compile."""
    return aot_compile.run_without_interpreter(script, cases)


def kernel_cli(args: list[str]) -> int:
    """`flashgen kernel ARGS` in this process (output to the test's captured stdout/stderr)."""
    from flashgen.kernels import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(args))


def check_kernel_cli(capsys, refused: list[str], reason: str, printed: list[str], kernel: str):
    """`flashgen kernel REFUSED` exits 2 with `reason` on stderr; where this Triton has Gluon,
    `flashgen kernel PRINTED` exits 0 and prints a source that defines the function `kernel`."""
    assert kernel_cli(refused) == 2
    err = capsys.readouterr().err
    assert reason in err, err
    if API is not None:
        assert kernel_cli(printed) == 0
        assert f"def {kernel}(" in capsys.readouterr().out
