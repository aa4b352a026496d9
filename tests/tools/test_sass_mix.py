"""tools/sass_mix.py: kernels, loops and opcode counts from cuobjdump's text, registers and stack
from its resource usage (synthetic text in cuobjdump's format; no CUDA tool needed)."""

import pytest

from tools import sass_mix

SASS = """
	code for sm_90a
		Function : _Z6kernelAPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IMAD.WIDE R2, R0, 0x4, R2 ;
        /*0020*/               @P0 LDG.E.NA.CONSTANT R4, desc[UR4][R2.64] ;
        /*0030*/                   HMMA.16816.F32 R8, R4, R6, R8 ;
        /*0040*/              @!P1 BRA 0x10 ;
        /*0050*/                   IMAD.MOV.U32 R5, RZ, RZ, R4 ;
        /*0060*/               @P2 BRA 0x50 ;
        /*0070*/                   EXIT ;
		..........
		Function : _Z6kernelBv
        /*0000*/                   EXIT ;
"""

RES = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z6kernelAPf:
  REG:128 STACK:16 SHARED:0 LOCAL:0 CONSTANT[0]:548 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z6kernelBv:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:528 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_functions_and_loops():
    funcs = sass_mix.parse_functions(SASS)
    assert list(funcs) == ["_Z6kernelAPf", "_Z6kernelBv"]
    code = funcs["_Z6kernelAPf"]
    assert len(code) == 8 and code[2] == (0x20, "@P0 LDG.E.NA.CONSTANT R4, desc[UR4][R2.64]")
    found = sass_mix.loops(code)
    # two backward branches, the larger first; predicates and modifiers do not split opcodes
    assert [(lp.start, lp.end, lp.size) for lp in found] == [(0x10, 0x40, 4), (0x50, 0x60, 2)]
    assert found[0].ops == {"IMAD": 1, "LDG": 1, "HMMA": 1, "BRA": 1}
    assert sass_mix.opcode("@!UPT UIADD3 UR4, UR4, 0x1, URZ") == "UIADD3"


def test_res_usage_and_report():
    assert sass_mix.parse_res_usage(RES) == {"_Z6kernelAPf": (128, 16), "_Z6kernelBv": (8, 0)}
    text = sass_mix.report(SASS, RES, "kernelA", loops_shown=1)
    assert "registers 128, stack 16 B" in text and "loop 0x10-0x40: 4 instructions" in text
    assert "0x50" not in text  # one loop shown
    assert sass_mix.report(SASS, RES, "nomatch", 1) == "no kernel matches 'nomatch'"


def test_bad_source(tmp_path):
    with pytest.raises(SystemExit):
        sass_mix.main([str(tmp_path / "missing.cu")])
    other = tmp_path / "x.ptx"
    other.write_text("")
    with pytest.raises(SystemExit):
        sass_mix.main([str(other)])
