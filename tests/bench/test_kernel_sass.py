"""benchmarks/kernel_sass.py's opcode count of `cuobjdump -sass` text (the counts RESULTS.md
quotes for kernel changes), on the CPU; the compile itself is the SRAM tests' path
(`sram_vs_compiler.compile_ahead`, tests/hardware/test_sram.py)."""

from __future__ import annotations

import repo_scripts

SASS = """
        code for sm_90
                Function : attn_fwd_tma
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 IMAD.MOV.U32 R2, RZ, RZ, R3 ;               /* 0x000000ffff028224 */
        /*0020*/                   IMAD.SHL.U32 R4, R2, 0x2, RZ ;               /* 0x0000000202047824 */
        /*0030*/                   SHF.R.U32.HI R5, RZ, 0x10, R4 ;             /* 0x00000010ff057819 */
        /*0040*/                   LOP3.LUT R5, R5, R4, RZ, 0x3c, !PT ;        /* 0x0000000405057212 */
        /*0050*/                   EXIT ;                                      /* 0x000000000000794d */
"""


def test_opcodes_are_counted_without_modifiers_or_predicates():
    sass = repo_scripts.load("benchmarks/kernel_sass.py")
    ops = sass.opcode_counts(SASS)
    assert ops == {"LDC": 1, "IMAD": 2, "SHF": 1, "LOP3": 1, "EXIT": 1}


def test_seq_takes_the_run_times_config_as_it_is(capsys):
    """--seq (the config `hopper.config_for` gives) does not take --late-wait, which edits the
    shipped one: a usage error naming both, before anything compiles."""
    import pytest

    sass = repo_scripts.load("benchmarks/kernel_sass.py")
    with pytest.raises(SystemExit) as exit_:
        sass.main(["--family", "hopper", "--seq", "4096", "--late-wait"])
    assert exit_.value.code == 2 and "--late-wait" in capsys.readouterr().err


def test_dense_needs_a_mask_tensor(capsys):
    """--dense (the mask read as a full [Sq, Sk] tile, MASK_PER_KEY off) means nothing without
    --attn-mask: a usage error before anything compiles."""
    import pytest

    sass = repo_scripts.load("benchmarks/kernel_sass.py")
    with pytest.raises(SystemExit) as exit_:
        sass.main(["--family", "hopper", "--dense"])
    assert exit_.value.code == 2 and "--dense needs --attn-mask" in capsys.readouterr().err


def _hopper_aot_reason() -> str | None:
    """None where this machine can compile the Hopper forward for sm_90 ahead of time and
    disassemble it (Gluon with its AST source, Triton's ptxas and cuobjdump), else why not."""
    from flashgen.kernels import hopper

    api, reason = hopper.gluon_api()
    if api is None:
        return reason
    try:
        from triton.backends.nvidia.compiler import get_ptxas
        from triton.experimental.gluon._runtime import GluonASTSource  # noqa: F401

        get_ptxas(90)
    except Exception as exc:  # any missing piece is a reason to skip
        return f"no sm_90 toolchain here: {exc}"
    return None


def test_hopper_family_counts_what_alibi_adds():
    """`--family hopper` compiles the Gluon forward for sm_90a and counts its opcodes: ALiBi's
    kernel has the plain one's exponentials and one more fused multiply-add a score (the
    counts behind session 22's revert of an ALiBi rendering), and neither spills."""
    import os
    import subprocess
    import sys

    import pytest

    reason = _hopper_aot_reason()
    if reason is not None:
        pytest.skip(reason)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rows = {}
    for extra in ([], ["--alibi"]):
        done = subprocess.run(
            [sys.executable, "benchmarks/kernel_sass.py", "--family", "hopper", "--head-dim",
             "64", *extra], env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        line = done.stdout.strip().splitlines()[-1]
        rows[bool(extra)] = dict(w.split("=") for w in line.split() if "=" in w)
    plain, alibi = rows[False], rows[True]
    # the exponentials are the plain kernel's (the epilogue may add one or two)
    assert 0 <= int(alibi["MUFU"]) - int(plain["MUFU"]) <= 4 and int(plain["HGMMA"]) > 0
    assert int(alibi["FFMA"]) > int(plain["FFMA"])
    assert plain["STL"] == alibi["STL"] == "0"
