"""Measured accumulation error of the LinearFp8 sm90 GEMM variants on one-signed data (all X, W
> 0: the tensor core's truncation errors add up instead of cancelling) and on random-sign data.
Prints, per variant, max |y - ref| / (sum_k |x w|) (the quantity the FP8 error limit bounds by
2e-3 for fp16, docs/ops.md) and whether the limit holds. Run on the device after the build:
  python3 bench/device/fp8_accum_error.py
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from pyquant import layout  # noqa: E402
from pyquant.ops_spec import ERROR_ATOL, FP8_OP  # noqa: E402
from pyquant.reference import linear_fp8_ref  # noqa: E402
from tests.cuda.test_cuda_fp8_paths import _fp8_session  # noqa: E402
from tests.cuda.test_cuda_ops import _as_t, run_cuda  # noqa: E402
from tests.ops.graphs import fp8_model  # noqa: E402

VARIANTS = {
    "default (promote 4)": {},
    "promote 8": {"PYQUANT_FP8_SM90_PROMOTE": "8"},
    "promote 16": {"PYQUANT_FP8_SM90_PROMOTE": "16"},
    "f128 FastAccum": {"PYQUANT_FP8_SM90_TILE": "f128"},
    "f256 FastAccum": {"PYQUANT_FP8_SM90_TILE": "f256"},
    "swap GEMV (M<=8)": {"PYQUANT_FP8_GEMV": "swap"},
    "mma GEMV (M<=8)": {},
}


def main():
    rng = np.random.default_rng(0)
    dtype = "float16"
    limit = ERROR_ATOL[FP8_OP][dtype]
    print(f"fp16 limit: |err| <= {limit:g} * sum|x w| + ulp")
    for k in (8192,):
        n = 256
        for kind in ("one-signed", "random-sign"):
            w = rng.standard_normal((n, k)).astype(np.float32)
            if kind == "one-signed":
                w = np.abs(w) + 0.1
            w8, ws = layout.quantize_weight_fp8(w, 0)
            model = fp8_model(w8, ws, dtype=dtype, block_size=0, x_scale=None, bias=None)
            for name, env in VARIANTS.items():
                gemv = "GEMV" in name
                m = 4 if gemv else 512
                sess = _fp8_session(model, env=env, min_m=(1 << 40) if gemv else None)
                x = rng.standard_normal((m, k))
                if kind == "one-signed":
                    x = np.abs(x) + 0.1
                x = _as_t(x, dtype)
                y = run_cuda(sess, x, n, dtype)
                y_ref, mag = linear_fp8_ref(x, w8, ws, 0, None, None)
                rel = np.abs(y - y_ref) / mag
                print(
                    f"K={k:5d} {kind:11s} {name:20s} max err/sum|xw| = {rel.max():.3e} "
                    f"({rel.max() / limit:.2f} of the limit; incl. fp16 output rounding)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
