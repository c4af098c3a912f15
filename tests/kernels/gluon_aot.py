"""What the Hopper (Gluon) kernel tests share: whether this Triton can compile Gluon for sm_90
ahead of time, compiling a list of cases in a child process, and running `flashgen kernel`.

A helper module, not a test file: tests/kernels/test_hopper.py (forward family) and
tests/kernels/test_hopper_bwd.py (backward kind) import it, so the two families' CPU checks
set up the compiler the same way.
"""

from __future__ import annotations

import argparse

import aot_compile


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
