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
