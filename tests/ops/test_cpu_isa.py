"""The CPU kernels under each instruction-set cap against the float64 reference: PYQUANT_CPU_ISA is
read once per process, so each cap runs the MatMulInt4 / LinearFp8 checks of test_matmul_int4.py /
test_linear_fp8.py in a subprocess. Small M (the GEMV kernels) and large M (the blocked GEMM's
micro-kernels and panel decoders, with partial row tiles and partial 16-column panels; INT4 at
every block size with K tails), and MatMulInt4's int8-activation kernels."""

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
# LinearFp8's large-M GEMM with per-channel scales: an odd K tail, a partial panel
for dtype in ["float32", "float16", "bfloat16"]:
    fp8_check(rng, 301, 37, dtype, block_size=0, with_bias=True, lead=(70,))

# The blocked GEMM's INT4 panel decoders at every block size, zero points over 0..15, 37 columns
# (a panel half-empty past N), K with tails: K = 300 / 301 (chunks of 256 + 44 / 45, an odd tail),
# 520 (256 + 256 + 8: a chunk shorter than the 16-code groups of the AVX2 decoder).
for bs in [16, 32, 64, 128, 256]:
    for k in [300, 301, 520]:
        int4_case(rng, k=k, n=37, bs=bs, dtype="float32", symmetric=False, with_bias=False, lead=(150,))

# MatMulInt4 with int8 activations (accuracy_level 4): the AVX2 kernels (also on AVX-512 hosts: the
# packed one on these initializers below M = 12, the tiles from it) and the portable one, blocks
# that share a 64-code chunk (16 / 32) and blocks of whole chunks, K tails, and the 4-row groups
# with every remainder.
from tests.ops.test_matmul_int4_int8 import case as int8_case

for bs in [16, 32, 64, 256]:
    for m in [1, 2, 3, 6, 11]:
        int8_case(rng, k=300, n=37, bs=bs, dtype="float32", symmetric=m % 2 == 0, with_bias=True, lead=(m,))
int8_case(rng, k=384, n=40, bs=128, dtype="bfloat16", symmetric=False, with_bias=False, lead=(2, 9))

# Every e4m3 code in W (subnormals, zeros of both signs, +-448), K = 300: the chunks of 256 and 44
# leave a tail of 4 codes after the 8-code groups of the AVX2 decoder; scale blocks of 16 and 32.
from pyquant import layout, reference
from pyquant.ops_spec import FP8_OP
from tests.ops.graphs import fp8_model, run

codes = np.arange(256, dtype=np.uint8)
codes = codes[(codes & 0x7F) != 0x7F]  # the NaN codes: below
for block_size in [0, 16, 32]:
    n, k = 37, 300
    wq = rng.choice(codes, size=(n, k)).astype(np.uint8).view(layout.FP8_DTYPE)
    nb = 1 if block_size == 0 else -(-k // block_size)
    ws = rng.uniform(0.5, 2.0, size=(n,) if block_size == 0 else (n, nb)).astype(np.float32)
    x = rng.standard_normal((40, k)).astype(np.float32)
    y = run(fp8_model(wq, ws, "float32", block_size), x)
    y_ref, mag = reference.linear_fp8_ref(x, wq, ws, block_size, None, None)
    reference.assert_within_limit(y, y_ref, mag, "float32", op=FP8_OP)
    # A NaN code (0x7F or 0xFF) makes its output column NaN and leaves the others alone.
    wq.view(np.uint8)[3, 17], wq.view(np.uint8)[20, 261] = 0x7F, 0xFF
    y = run(fp8_model(wq, ws, "float32", block_size), x)
    assert np.isnan(y[:, [3, 20]]).all() and np.isfinite(np.delete(y, [3, 20], axis=1)).all()
print("ok")
"""


# "auto-nobf16" / "auto-bf16": the CPU's own ISA with LinearFp8's AVX512-BF16 GEMM off / on
# (PYQUANT_CPU_FP8_BF16=0 / 1), so that an AVX-512 host runs both per-channel paths ("auto" takes
# the bf16 one where the CPU has AVX512-BF16 and its throughput probe favours it).
@pytest.mark.parametrize("isa", ["base", "avx2", "auto", "auto-nobf16", "auto-bf16"])
def test_cpu_isa_caps_match_reference(isa):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if isa in ("auto-nobf16", "auto-bf16"):
        env["PYQUANT_CPU_FP8_BF16"] = "0" if isa == "auto-nobf16" else "1"
    elif isa != "auto":
        env["PYQUANT_CPU_ISA"] = isa
    cmd = [sys.executable, "-c", SCRIPT]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-2000:] + out.stderr[-4000:]
