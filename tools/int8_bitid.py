"""Bit-identity check of two builds of the op library's int8-activation MatMulInt4 (accuracy_level 4).

    PYQUANT_LIBRARY=a/libpyquant_ops.so python tools/int8_bitid.py a.npz
    PYQUANT_LIBRARY=b/libpyquant_ops.so python tools/int8_bitid.py b.npz
    python tools/int8_bitid.py cmp a.npz b.npz      # exit 1 if any case differs

Dumps the output bytes of 189 cases (every dtype, blocks 16..256, with / without zero points, M 1..300,
K not a multiple of the block, all-zero rows, shapes across the kernel's panel boundaries). For kernel
changes meant to keep the summation order: a different order shows up (the portable kernel,
PYQUANT_CPU_ISA=base, differs from the AVX2 one in about half the cases).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyquant import layout  # noqa: E402
from tests.ops.graphs import int4_model, np_dtype, run  # noqa: E402


def cases():
    rng = np.random.default_rng(123)
    out = []
    for bs in (16, 32, 64, 128, 256):
        for dtype in ("float32", "float16", "bfloat16"):
            for sym in (True, False):
                for _ in range(6):
                    k = int(rng.choice([bs, 2 * bs, 3 * bs + 5, 576, 1000, 2048, 777, 64 * 9 + 1]))
                    n = int(rng.choice([1, 2, 3, 5, 8, 17, 64, 130, 257, 520]))
                    m = int(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 31, 64, 127, 300]))
                    out.append((k, n, bs, dtype, sym, m))
    # panel boundaries: rows of 2-4 KiB, tasks of 68 / 128 rows
    for bs in (32, 128, 256):
        out.append((4096, 4096, bs, "float32", True, 9))
        out.append((8192, 2100, bs, "float16", False, 6))
        out.append((8192, 2100, bs, "float32", True, 13))
    return out


def main(path):
    res = {}
    for idx, (k, n, bs, dtype, sym, m) in enumerate(cases()):
        rng = np.random.default_rng(idx)
        w = rng.standard_normal((n, k)).astype(np.float32)
        b, s, zp = layout.quantize_int4_rtn(w, bs, symmetric=sym)
        if not sym:
            zp = layout.pack_zero_points(
                rng.integers(0, 16, size=(n, layout.n_blocks(k, bs))).astype(np.uint8)
            )
        s = s.astype(np_dtype(dtype))
        x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10.0, size=(m, 1))).astype(np_dtype(dtype))
        if idx % 7 == 3 and m > 2:
            x[1] = 0  # an all-zero row
        model = int4_model(
            b,
            s,
            k,
            n,
            bs,
            dtype=dtype,
            zero_points=zp if not sym else None,
            x_shape=["M", None],
            attrs={"K": k, "N": n, "block_size": bs, "accuracy_level": 4},
        )
        y = run(model, x)
        res[f"{idx}_{k}_{n}_{bs}_{dtype}_{sym}_{m}"] = np.frombuffer(
            np.ascontiguousarray(y).tobytes(), np.uint8
        )
    np.savez(path, **res)
    print(len(res), "cases ->", path)


if __name__ == "__main__":
    if sys.argv[1] == "cmp":
        a, b = np.load(sys.argv[2]), np.load(sys.argv[3])
        assert sorted(a.files) == sorted(b.files)
        bad = [f for f in a.files if not np.array_equal(a[f], b[f])]
        print(len(a.files), "cases compared;", len(bad), "differ", bad[:10])
        sys.exit(1 if bad else 0)
    main(sys.argv[1])
