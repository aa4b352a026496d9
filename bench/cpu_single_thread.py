"""Single-thread CPU time of MatMulInt4 per layer, for A / B comparisons of CPU kernels on a shared host.

    PYQUANT_LIBRARY=<build>/libpyquant_ops.so python bench/cpu_single_thread.py 4096x4096,384x1536 16,32,1024

One session per shape (block 128, symmetric, float32 X), intra_op_num_threads = 1; per M the minimum
over >= 1 s of runs of time.thread_time() around session.run (ORT runs the kernel on the calling
thread, so time the scheduler gives to other tenants is not counted; their cache and memory traffic
still is). Run the two libraries alternately, a few rounds, and compare the minima."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main() -> None:
    import onnxruntime as ort

    from pyquant import layout
    from pyquant.ort import session_options
    from tests.ops.graphs import int4_model

    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[1].split(",")]
    m_list = [int(v) for v in sys.argv[2].split(",")]
    rng = np.random.default_rng(0)
    for k, n in shapes:
        b, s, _ = layout.quantize_int4_rtn(
            rng.standard_normal((n, k)).astype(np.float32), 128, symmetric=True
        )
        so = session_options()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        model = int4_model(b, s, k, n, 128, dtype="float32").SerializeToString()
        sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
        for m in m_list:
            x = rng.standard_normal((m, k)).astype(np.float32)
            for _ in range(2):
                sess.run(None, {"X": x})
            times = []
            t_end = time.perf_counter() + 1.0
            while time.perf_counter() < t_end or len(times) < 5:
                t0 = time.thread_time()
                sess.run(None, {"X": x})
                times.append(time.thread_time() - t0)
            print(f"{k}x{n} M={m} {min(times) * 1e3:.3f} ms", flush=True)


if __name__ == "__main__":
    main()
