"""Names of the CUDA ops' environment switches that pick kernel variants (benchmarks, device tests).

The C++ lists that the ops read at kernel creation are the single source of truth; this module
mirrors them so that the benchmark and the tests do not repeat them, and
``tests/ops/test_library.py`` checks that the two agree.

``FP8_SM90_TILES``: the ``PYQUANT_FP8_SM90_TILE`` names of ``CudaFp8Options`` in
``ort_ops/cuda/linear_fp8_op.cc`` after "auto" (the name at index i selects Hopper GEMM variant
i + 1: ``ort_ops/cuda/sm90/fp8_gemm_sm90_variants.cu``).

``INT4_SM90_TILES``: the same for ``PYQUANT_INT4_SM90_TILE`` (``CudaInt4Sm90Tile`` in
``ort_ops/cuda/matmul_int4_op.cc``; ``ort_ops/cuda/sm90/int4_gemm_sm90_variants.cu``, and the
named indices ``kInt4Sm90TilePingpong128`` / ``kInt4Sm90TileCooperative`` /
``kInt4Sm90TileWide192`` / ``kInt4Sm90TilePingpong192`` of ``ort_ops/cuda/sm90/int4_gemm_sm90.h``).
"""

from __future__ import annotations

FP8_SM90_TILES: tuple[str, ...] = (
    "f128",
    "f256",
    "c2",
    "f256c2",
    "p128",
    "p128c2",
    "p64",
    "n64",
    "f192",
    "f192c2",
    "c128",
    "o128",
    "o256",
    "o256c2",
    "op128",
    "o256s",
)

INT4_SM90_TILES: tuple[str, ...] = (
    "c1",
    "c2m",
    "k128",
    "p128",
    "p256",
    "p64",
    "shuf",
    "coop",
    "w192",
    "p192",
)
