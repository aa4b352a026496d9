"""Names, MatMulInt4 attributes and error limits of the pyquant ONNX ops (docs/ops.md is the spec)."""

from __future__ import annotations

DOMAIN = "pyquant"
OPSET_VERSION = 1
INT4_OP = "MatMulInt4"
FP8_OP = "LinearFp8"
# Writes one step's keys / values into a static KV cache at given slots, in place when its output is
# its input's buffer (docs/ops.md, "KVCacheWrite"; pyquant/export_lm.py).
KV_CACHE_WRITE_OP = "KVCacheWrite"

# |y - y_ref| <= ERROR_ATOL[op][T] * sum_k |x_k w_k| + ulp_T(y_ref); declared once per op, here
# and in docs/ops.md. FP8 float32 is looser: Hopper's FP8 tensor cores accumulate in reduced precision.
ERROR_ATOL = {
    INT4_OP: {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2},
    FP8_OP: {"float32": 2e-4, "float16": 2e-3, "bfloat16": 1.6e-2},
}

# MatMulInt4 attributes (docs/ops.md, "Attributes"): K, N, block_size required; bits (4) and
# accuracy_level (0) optional. accuracy_level has MatMulNBits' name and values: 0-3 compute with X
# as float32, INT4_INT8_ACTIVATIONS quantizes X to int8 per row and block ("Int8 activations").
INT4_REQUIRED_ATTRIBUTES = ("K", "N", "block_size")
INT4_ATTRIBUTES = (*INT4_REQUIRED_ATTRIBUTES, "bits", "accuracy_level")
INT4_ACCURACY_LEVELS = (0, 1, 2, 3, 4)
INT4_INT8_ACTIVATIONS = 4
