"""tools/sass.py's readers of cuobjdump's output (no cuobjdump needed): kernels split at their
`Function :` headers, instructions counted by opcode with predicates and encodings skipped, and
registers read from -res-usage."""

import collections
import importlib
import sys
from pathlib import Path

import pytest

pytest.importorskip("tabulate")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
sass = importlib.import_module("sass")

SASS = """
\t\tFunction : _Z1av
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000ff00000000800 */
        /*0010*/              @!P0 BRA 0x40 ;                             /* 0x0000000000000947 */
        /*0020*/                   FADD.FTZ R2, R2, R3 ;                  /* 0x0000000302027221 */
        /*0030*/              @UP1 FADD R2, R2, R3 ;                      /* 0x0000000302027221 */
\t\tFunction : _Z1bv
        /*0000*/                   EXIT ;                                 /* 0x000000000000794d */
"""
RES = """
Resource usage:
 Common:
  GLOBAL:0
 Function _Z1av:
  REG:43 STACK:0 SHARED:1280 LOCAL:0 CONSTANT[0]:600 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z1bv:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:352 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def opcodes(lines):
    return collections.Counter(
        m.group(1).split(".")[0] for line in lines if (m := sass.INSTRUCTION.match(line))
    )


def test_kernels_split_and_opcodes_counted():
    funcs = sass.functions(SASS)
    assert list(funcs) == ["_Z1av", "_Z1bv"]
    assert opcodes(funcs["_Z1av"]) == {"LDC": 1, "BRA": 1, "FADD": 2}
    assert opcodes(funcs["_Z1bv"]) == {"EXIT": 1}


def test_resource_usage_read_per_kernel():
    usage = sass.resources(RES)
    assert usage["_Z1av"]["REG"] == 43 and usage["_Z1av"]["SHARED"] == 1280
    assert usage["_Z1bv"]["REG"] == 8
