"""compute-sanitizer memcheck on the benchmark's own shapes and M (session 25: bench_cuda.py's
interleaved run of six methods hit an illegal address on an H100; each method alone did not).

    compute-sanitizer --tool memcheck python3 bench/device/memcheck_bench_shapes.py [--shapes ..] [--m ..]

One session per op and shape (INT4 block 128 symmetric, FP8 per channel; fp16; B a constant
initializer, as in the benchmark), every M in turn; M <= 64 checked against the float64 reference."""

from __future__ import annotations

import argparse
import sys

import numpy as np

sys.path.insert(0, ".")


def main() -> int:
    import onnxruntime as ort

    from pyquant import layout
    from pyquant.ops_spec import FP8_OP
    from pyquant.ort import session_options
    from pyquant.reference import assert_within_limit, linear_fp8_ref, matmul_int4_ref
    from tests.ops.graphs import fp8_model, int4_model, run_session

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="4096x14336,14336x4096")
    ap.add_argument("--m", default="1,4,16,64,256,1024")
    ap.add_argument("--ops", default="int4,fp8")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    so = session_options()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    m_list = [int(v) for v in args.m.split(",")]
    for shape in args.shapes.split(","):
        k, n = (int(v) for v in shape.split("x"))
        w = (0.02 * rng.standard_normal((n, k))).astype(np.float32)
        for op in args.ops.split(","):
            if op == "int4":
                b, s, _ = layout.quantize_int4_rtn(w, 128, symmetric=True)
                model = int4_model(b, s, k, n, 128, dtype="float16")
            else:
                w8, ws = layout.quantize_weight_fp8(w, 0)
                model = fp8_model(w8, ws, dtype="float16", block_size=0)
            sess = ort.InferenceSession(
                model.SerializeToString(), sess_options=so, providers=["CUDAExecutionProvider"]
            )
            for m in m_list:
                x = rng.standard_normal((m, k)).astype(np.float16)
                y = np.asarray(run_session(sess, x), dtype=np.float64)
                if m <= 64:
                    if op == "int4":
                        st = s.astype(np.float16).astype(np.float64)
                        yr, mag = matmul_int4_ref(x.astype(np.float64), b, st, k, n, 128)
                        assert_within_limit(y, yr, mag, "float16")
                    else:
                        yr, mag = linear_fp8_ref(x.astype(np.float64), w8, ws, 0)
                        assert_within_limit(y, yr, mag, "float16", op=FP8_OP)
                print(f"{op} {k}x{n} M={m}: ok (finite {np.isfinite(y).all()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
