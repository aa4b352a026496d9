"""The CPU kernels under each instruction-set cap against the float64 reference: PYQUANT_CPU_ISA is
read once per process, so each cap runs the MatMulInt4 / LinearFp8 checks of test_matmul_int4.py /
test_linear_fp8.py in a subprocess. Small M (the GEMV kernels) and large M (the blocked GEMM's
micro-kernels and panel decoders, with partial row tiles and partial 16-column panels)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import numpy as np
from tests.ops.test_linear_fp8 import _check as fp8_check
from tests.ops.test_matmul_int4 import _case as int4_case

rng = np.random.default_rng(7)
for lead in [(3,), (2, 75)]:
    for dtype in ["float32", "float16", "bfloat16"]:
        int4_case(rng, k=384, n=40, bs=128, dtype=dtype, symmetric=False, with_bias=True, lead=lead)
        int4_case(rng, k=320, n=35, bs=32, dtype=dtype, symmetric=True, with_bias=False, lead=lead)
        fp8_check(rng, 384, 40, dtype, block_size=0, with_bias=True, lead=lead)
        fp8_check(rng, 320, 35, dtype, block_size=64, lead=lead)
print("ok")
"""


@pytest.mark.parametrize("isa", ["base", "avx2", "auto"])
def test_cpu_isa_caps_match_reference(isa):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if isa != "auto":
        env["PYQUANT_CPU_ISA"] = isa
    cmd = [sys.executable, "-c", SCRIPT]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-4000:]
