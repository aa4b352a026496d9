"""Issue #7 on the CUDA execution provider: concurrency and CUDA graph capture with both ops.

(a) 8 threads over 2 CUDA-EP sessions of one graph X -> MatMulInt4 -> LinearFp8 -> Y give
    bit-identical results to serial runs (node-owned scratch, no shared mutable kernel state).
(b) a session with the CUDA EP's ``enable_cuda_graph`` and IOBinding: ORT runs the graph
    normally, captures it, then replays it; new input values copied into the bound device buffer
    (same address) must produce the outputs of an uncaptured session bit for bit, so no kernel
    baked a host-side value of X (or a per-run allocation) into the captured graph.

Bit-identity needs deterministic kernels (fixed reduction order, no atomics on float sums), which
ort_ops/cuda promises. Marked ``cuda``: skipped (tests/conftest.py) without onnxruntime's
CUDAExecutionProvider and a CUDA build of the library. Inputs and outputs travel as ORT
OrtValues on the device, so torch's CUDA build is not needed.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pyquant import layout
from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP
from tests.ops.graphs import _init as init

pytestmark = pytest.mark.cuda

K, H, N, BS = 256, 192, 96, 64
ONNX_T = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}
NP_T = {"float32": np.float32, "float16": np.float16}


def two_op_model(dtype: str, fp8_static: bool, m: int | str = "M", seed: int = 0) -> onnx.ModelProto:
    """X [m, K] -> MatMulInt4 (asymmetric, bias) -> LinearFp8 (per-block scales, static or dynamic
    activation scale, bias) -> Y [m, N], weights as initializers."""
    rng = np.random.default_rng(seed)
    b, s, zp = layout.quantize_int4_rtn(rng.standard_normal((H, K)), BS, symmetric=False)
    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((N, H)).astype(np.float32), 32)
    t = NP_T[dtype]
    inits = [
        init("B", b),
        init("scales", s.astype(t)),
        init("zero_points", zp),
        init("bias1", rng.standard_normal(H).astype(t)),
        init("W", wq, TensorProto.FLOAT8E4M3FN),
        init("w_scale", ws.astype(np.float32)),
        init("bias2", rng.standard_normal(N).astype(t)),
    ]
    fp8_inputs = ["H", "W", "w_scale", "x_scale" if fp8_static else "", "bias2"]
    if fp8_static:
        inits.append(init("x_scale", np.array(40.0 / layout.FP8_E4M3_MAX, dtype=np.float32)))
    nodes = [
        helper.make_node(
            INT4_OP,
            ["X", "B", "scales", "zero_points", "bias1"],
            ["H"],
            domain=DOMAIN,
            name="int4",
            K=K,
            N=H,
            block_size=BS,
        ),
        helper.make_node(FP8_OP, fp8_inputs, ["Y"], domain=DOMAIN, name="fp8", block_size=32),
    ]
    graph = helper.make_graph(
        nodes,
        "two_ops",
        [helper.make_tensor_value_info("X", ONNX_T[dtype], [m, K])],
        [helper.make_tensor_value_info("Y", ONNX_T[dtype], [m, N])],
        initializer=inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)],
        ir_version=10,
    )


def cuda_session(model: onnx.ModelProto, cuda_graph: bool = False, intra_threads: int | None = None):  # noqa: ANN201
    """CUDA-EP-only session (no silent CPU fallback for our nodes), optionally with CUDA graphs."""
    import onnxruntime as ort

    from pyquant.ort import session_options

    so = session_options(ort.SessionOptions())
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if intra_threads is not None:
        so.intra_op_num_threads = intra_threads
    opts = {"device_id": "0"}
    if cuda_graph:
        opts["enable_cuda_graph"] = "1"
    return ort.InferenceSession(
        model.SerializeToString(), sess_options=so, providers=[("CUDAExecutionProvider", opts)]
    )


def _inputs(dtype: str, ms: list[int], seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    # A spread of magnitudes per row, so the dynamic FP8 scale differs from token to token.
    return [
        (rng.standard_normal((m, K)) * rng.uniform(0.1, 20.0, size=(m, 1))).astype(NP_T[dtype]) for m in ms
    ]


@pytest.mark.parametrize("fp8_static", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_concurrent_sessions_bit_identical(dtype: str, fp8_static: bool) -> None:
    model = two_op_model(dtype, fp8_static)
    # M from the GEMV-style small-M kernels to the tiled large-M ones (ort_ops/cuda dispatch).
    inputs = _inputs(dtype, [1, 3, 16, 33, 64, 200])
    sessions = [cuda_session(model, intra_threads=2) for _ in range(2)]
    assert_concurrent_runs_bit_identical(sessions, inputs, jobs=96)


def assert_concurrent_runs_bit_identical(sessions: list, inputs: list[np.ndarray], jobs: int) -> None:
    """Two sessions of one model: each input run serially on sessions[0] (finite, and sessions[1]
    agrees bit for bit), then `jobs` runs over 8 threads, alternating sessions and inputs, each equal
    to the serial result bit for bit."""
    serial = [sessions[0].run(None, {"X": x})[0] for x in inputs]
    for x, y in zip(inputs, serial, strict=True):  # the two sessions agree serially too
        np.testing.assert_array_equal(sessions[1].run(None, {"X": x})[0], y)
        assert np.isfinite(y).all()

    def job(i: int) -> tuple[int, np.ndarray]:
        return i, sessions[i % 2].run(None, {"X": inputs[i % len(inputs)]})[0]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(job, range(jobs)))
    for i, y in results:
        np.testing.assert_array_equal(y, serial[i % len(inputs)], err_msg=f"job {i}")


@pytest.mark.parametrize("fp8_static", [False, True])
@pytest.mark.parametrize("m", [1, 16, 96])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cuda_graph_capture_and_replay_bit_exact(dtype: str, m: int, fp8_static: bool) -> None:
    import onnxruntime as ort

    # CUDA graphs replay fixed shapes and addresses: a static-shape graph, device buffers bound once.
    model = two_op_model(dtype, fp8_static, m=m)
    graphed = cuda_session(model, cuda_graph=True)
    plain = cuda_session(model)
    xs = _inputs(dtype, [m] * 8, seed=m)
    x_dev = ort.OrtValue.ortvalue_from_numpy(xs[0], "cuda", 0)
    y_dev = ort.OrtValue.ortvalue_from_shape_and_type([m, N], NP_T[dtype], "cuda", 0)
    io = graphed.io_binding()
    io.bind_ortvalue_input("X", x_dev)
    io.bind_ortvalue_output("Y", y_dev)
    outs = []
    # The first runs are ORT's warm-up and capture runs; the later ones are replays. Every run gets
    # new values in the same device buffer.
    for x in xs:
        x_dev.update_inplace(x)
        graphed.run_with_iobinding(io)
        y = y_dev.numpy()
        want = plain.run(None, {"X": x})[0]
        np.testing.assert_array_equal(y, want)
        outs.append(y)
    assert np.isfinite(outs[-1]).all()
    # Replays really recompute (not a stale output of the captured run).
    assert not np.array_equal(outs[-1], outs[-2])
    # Going back to an earlier input reproduces its output exactly.
    x_dev.update_inplace(xs[0])
    graphed.run_with_iobinding(io)
    np.testing.assert_array_equal(y_dev.numpy(), outs[0])
