"""Every M <= 8 (decode) kernel variant of MatMulInt4 (PYQUANT_INT4_GEMV_VARIANT, read at kernel
creation; matmul_int4_impl.cu / matmul_int4_gemv_impl.cu) against the float64 reference: odd N
(partial 8- and 16-row tiles), K tails inside the last block, block sizes 32 and 128, symmetric
and asymmetric, bias, fp16 and bf16. Outputs are poisoned (NaN) before each run."""

from __future__ import annotations

import os

import pytest

from tests.cuda.test_cuda_ops import _check_int4, _int4_case, _session

pytestmark = pytest.mark.cuda

N_VARIANTS = 9


@pytest.mark.parametrize("variant", range(N_VARIANTS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("bs", [32, 128])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("kn", [(4096, 520), (1000, 37), (200, 24)])
def test_int4_gemv_variants(rng, variant, dtype, bs, symmetric, kn):
    k, n = kn
    model, b, scales_t, zp, bias_t = _int4_case(rng, k, n, bs, dtype, symmetric, True)
    os.environ["PYQUANT_INT4_GEMV_VARIANT"] = str(variant)
    try:
        sess = _session(model)
    finally:
        os.environ.pop("PYQUANT_INT4_GEMV_VARIANT", None)
    _check_int4(sess, rng, [1, 2, 3, 5, 8], k, n, bs, dtype, b, scales_t, zp, bias_t)
