"""Concurrent runs (8 threads over 2 sessions) give bit-identical results to serial runs."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort

from pyquant import layout
from pyquant.ort import make_session
from tests.ops.graphs import fp8_model, int4_model


def _sessions(model, n=2):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return [make_session(model.SerializeToString(), options=so) for _ in range(n)]


def _check_concurrent(model, inputs):
    sessions = _sessions(model)
    serial = [sessions[0].run(None, {"X": x})[0] for x in inputs]

    def job(i):
        return i, sessions[i % 2].run(None, {"X": inputs[i % len(inputs)]})[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(job, range(48)))
    for i, y in results:
        np.testing.assert_array_equal(y, serial[i % len(inputs)])


def test_int4_concurrent_bit_identical(rng):
    k, n, bs = 512, 96, 64
    b, s, zp = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs, symmetric=False)
    model = int4_model(b, s, k, n, bs, zero_points=zp, bias=rng.standard_normal(n).astype(np.float32))
    inputs = [rng.standard_normal((m, k)).astype(np.float32) for m in (1, 5, 40, 130)]
    _check_concurrent(model, inputs)


def test_fp8_concurrent_bit_identical(rng):
    k, n = 384, 80
    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((n, k)).astype(np.float32), 128)
    model = fp8_model(wq, ws, block_size=128)
    inputs = [rng.standard_normal((m, k)).astype(np.float32) for m in (1, 7, 64, 130)]
    _check_concurrent(model, inputs)
