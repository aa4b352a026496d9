"""The library as a package: loading, exported symbols, shape inference, layout agreement."""

import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import pyquant
from pyquant import layout
from pyquant.ort import make_session, resolve_providers
from pyquant.shape_inference import infer_shapes
from tests.ops.graphs import fp8_model, int4_model

REPO = Path(__file__).resolve().parents[2]


def test_library_found_and_built():
    path = Path(pyquant.get_library_path())
    assert path.is_file()
    info = pyquant.build_info()
    assert info["version"] == pyquant.__version__
    assert isinstance(info["cuda"], bool)


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs binutils nm")
def test_only_registration_symbol_exported():
    out = subprocess.run(
        ["nm", "-D", "--defined-only", pyquant.get_library_path()], capture_output=True, text=True
    )
    symbols = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert symbols == {"RegisterCustomOps"}


@pytest.mark.skipif(shutil.which("ldd") is None, reason="needs ldd")
def test_library_links_neither_torch_nor_onnxruntime():
    out = subprocess.run(["ldd", pyquant.get_library_path()], capture_output=True, text=True).stdout
    assert "torch" not in out and "onnxruntime" not in out and "cudart.so" not in out


def test_missing_library_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PYQUANT_LIBRARY", "/nonexistent/libpyquant_ops.so")
    with pytest.raises(pyquant._library.LibraryNotFoundError, match="pip install"):
        pyquant.get_library_path()


def test_cuda_request_falls_back_to_cpu_when_unavailable():
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_providers(("cuda", "cpu")) == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider" in str(w.message) for w in caught)
    with pytest.raises(RuntimeError, match="not available"):
        resolve_providers(("cuda",), strict=True)


@pytest.mark.skipif(
    tuple(int(v) for v in __import__("onnxruntime").__version__.split(".")[:2]) < (1, 24),
    reason="the library registers no shape function before ORT 1.24 (an ORT bug, see ort_ops/register.cc)",
)
def test_ort_infers_symbolic_output_shapes(rng):
    k, n, bs = 64, 24, 32
    b, s, _ = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs)
    model = int4_model(b, s, k, n, bs, x_shape=("batch", "seq", None))
    model.graph.output[0].type.tensor_type.ClearField("shape")  # ORT must infer it from the library
    sess = make_session(model.SerializeToString())
    assert sess.get_outputs()[0].shape == ["batch", "seq", n]


def test_onnx_shape_inference_through_chain(rng):
    """int4 -> fp8 chain: pyquant.shape_inference fills both outputs for `onnx` users."""
    k, n, bs = 64, 32, 32
    b, s, _ = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs)
    m1 = int4_model(b, s, k, n, bs, x_shape=("B", None))
    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((8, n)).astype(np.float32))
    m2 = fp8_model(wq, ws, x_shape=("B", None))
    g = m1.graph
    node2 = m2.graph.node[0]
    node2.input[0] = "Y"
    node2.output[0] = "Z"
    g.node.append(node2)
    g.initializer.extend(m2.graph.initializer)
    g.output.pop()
    g.output.append(helper.make_tensor_value_info("Z", TensorProto.FLOAT, None))
    inferred = infer_shapes(m1)
    vi = {v.name: v for v in inferred.graph.value_info}
    dims = lambda t: [d.dim_value or d.dim_param for d in t.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(vi["Y"]) == ["B", 32]
    assert dims(inferred.graph.output[0]) == ["B", 8]


def _header_constants() -> dict[str, int]:
    text = (REPO / "ort_ops" / "layout" / "int4_block.h").read_text()
    return {m[0]: float(m[1].rstrip("f")) for m in re.findall(r"constexpr \w+ (k\w+) = ([0-9.]+f?);", text)}


def test_python_layout_mirrors_header():
    c = _header_constants()
    assert c["kInt4Bits"] == layout.INT4_BITS
    assert c["kInt4CodesPerByte"] == layout.INT4_CODES_PER_BYTE
    assert c["kInt4MinBlock"] == layout.INT4_MIN_BLOCK
    assert c["kInt4MaxBlock"] == layout.INT4_MAX_BLOCK
    assert c["kInt4SymmetricZeroPoint"] == layout.INT4_SYMMETRIC_ZERO_POINT
    assert c["kFp8E4M3Max"] == layout.FP8_E4M3_MAX


def test_pack_unpack_roundtrip(rng):
    for k, bs in [(64, 16), (100, 32), (576, 128), (7, 256)]:
        q = rng.integers(0, 16, size=(5, k)).astype(np.uint8)
        b = layout.pack_int4(q, bs)
        assert b.shape == (5, layout.n_blocks(k, bs), bs // 2)
        np.testing.assert_array_equal(layout.unpack_int4(b, k), q)
        zp = rng.integers(0, 16, size=(5, layout.n_blocks(k, bs))).astype(np.uint8)
        np.testing.assert_array_equal(layout.unpack_zero_points(layout.pack_zero_points(zp), zp.shape[1]), zp)


def test_shuffled_order_mirrors_header(tmp_path, rng):
    """pyquant.layout's shuffled order (Python mirror) and Int4ShuffledNibble of
    ort_ops/layout/int4_shuffled.h (the source of truth) give the same nibble for every code of a
    48 x 64 weight; the order is a permutation; and each 32-bit word holds the mma.sync A fragment
    the header's diagram promises (row p / p + 8, k = 2w, 2w + 1, 2w + 8, 2w + 9)."""
    import shutil
    import subprocess

    n_rows, k = 48, 64
    nn, kk = np.meshgrid(np.arange(n_rows), np.arange(k), indexing="ij")
    py = layout.int4_shuffled_nibble(nn, kk, n_rows)
    assert sorted(py.ravel().tolist()) == list(range(n_rows * k))
    # word w of piece p in tile (0, 0): nibbles 8 (4p + w) .. + 7
    q = rng.integers(0, 16, size=(n_rows, k)).astype(np.uint8)
    words = layout.shuffle_int4(q).view(np.uint32)
    for p in range(8):
        for w in range(4):
            v = int(words[4 * p + w])
            got = [(v >> (4 * i)) & 0xF for i in range(8)]
            r0, r1, c = p, p + 8, 2 * w
            want = [
                q[r0, c],
                q[r1, c],
                q[r0, c + 8],
                q[r1, c + 8],
                q[r0, c + 1],
                q[r1, c + 1],
                q[r0, c + 9],
                q[r1, c + 9],
            ]
            assert got == want, (p, w)

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler to evaluate the header")
    src = tmp_path / "nibbles.cc"
    src.write_text(
        '#include <cstdio>\n#include "layout/int4_shuffled.h"\n'
        "int main() { for (int n = 0; n < 48; ++n) for (int k = 0; k < 64; ++k)"
        ' std::printf("%lld\\n", (long long)pyquant::Int4ShuffledNibble(n, k, 48)); }\n'
    )
    exe = tmp_path / "nibbles"
    subprocess.run([cxx, "-std=c++17", "-I", str(REPO / "ort_ops"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    np.testing.assert_array_equal(np.array(out, dtype=np.int64), py.ravel())


def test_int4_weights_read_by_other_ops(rng):
    """make_session's guard for the in-place GPU layout: a MatMulInt4 B that another op (here an
    Identity to a graph output, and a node inside an If branch) also reads is reported; B read only
    by MatMulInt4 nodes is not, whatever the form of the model (proto, bytes, path)."""
    import onnx
    from onnx import helper

    from pyquant import layout
    from pyquant.ort import int4_weights_read_by_other_ops, make_session
    from tests.ops.graphs import int4_model

    k, n, bs = 64, 16, 32
    w = rng.standard_normal((n, k)).astype(np.float32)
    b, s, _ = layout.quantize_int4_rtn(w, bs, symmetric=True)
    model = int4_model(b, s, k, n, bs)
    assert int4_weights_read_by_other_ops(model) == []
    assert int4_weights_read_by_other_ops(model.SerializeToString()) == []

    shared = onnx.ModelProto()
    shared.CopyFrom(model)
    shared.graph.node.append(helper.make_node("Identity", ["B"], ["B_copy"]))
    shared.graph.output.append(helper.make_tensor_value_info("B_copy", onnx.TensorProto.UINT8, None))
    assert int4_weights_read_by_other_ops(shared) == ["B"]

    in_branch = onnx.ModelProto()
    in_branch.CopyFrom(model)
    branch = helper.make_graph(
        [helper.make_node("Identity", ["B"], ["B_out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("B_out", onnx.TensorProto.UINT8, None)],
    )
    in_branch.graph.node.append(
        helper.make_node("If", ["cond"], ["B_if"], then_branch=branch, else_branch=branch)
    )
    assert int4_weights_read_by_other_ops(in_branch) == ["B"]

    # On the CPU provider the guard is not needed: the session is made as usual, no warning.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = make_session(shared.SerializeToString(), providers=("cpu",))
    x = rng.standard_normal((2, k)).astype(np.float32)
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"X": x}), strict=True))
    assert np.array_equal(out["B_copy"], b)


def test_make_session_int4_gpu_layout(rng, monkeypatch):
    """make_session(int4_gpu_layout=...) sets PYQUANT_INT4_SHUFFLE (what each CUDA MatMulInt4 node
    reads, matmul_int4_op.cc) only while the session is created and restores the caller's value;
    with the CUDA provider a B that another op reads forces "0" with a warning, unless the caller
    set the variable without the argument; an unknown layout is a clear error."""
    import onnx
    from onnx import helper

    import pyquant.ort as pq_ort
    from pyquant import layout
    from tests.ops.graphs import int4_model

    k, n, bs = 64, 16, 32
    b, s, _ = layout.quantize_int4_rtn(rng.standard_normal((n, k)).astype(np.float32), bs, symmetric=True)
    model = int4_model(b, s, k, n, bs).SerializeToString()
    shared = onnx.load_from_string(model)
    shared.graph.node.append(helper.make_node("Identity", ["B"], ["B_copy"]))
    shared.graph.output.append(helper.make_tensor_value_info("B_copy", onnx.TensorProto.UINT8, None))
    shared = shared.SerializeToString()

    seen: list[str | None] = []

    def fake_session(model, sess_options=None, providers=None):
        seen.append(os.environ.get("PYQUANT_INT4_SHUFFLE"))
        return providers

    monkeypatch.setattr(pq_ort.ort, "InferenceSession", fake_session)
    monkeypatch.setattr(
        pq_ort, "resolve_providers", lambda p, strict: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    monkeypatch.delenv("PYQUANT_INT4_SHUFFLE", raising=False)

    pq_ort.make_session(model)
    pq_ort.make_session(model, int4_gpu_layout="all")
    pq_ort.make_session(model, int4_gpu_layout="row-major")
    assert seen == [None, "all", "0"] and "PYQUANT_INT4_SHUFFLE" not in os.environ

    monkeypatch.setenv("PYQUANT_INT4_SHUFFLE", "0")
    pq_ort.make_session(model, int4_gpu_layout="default")
    assert seen[-1] == "1" and os.environ["PYQUANT_INT4_SHUFFLE"] == "0"

    with pytest.warns(UserWarning, match="also read by other ops"):
        pq_ort.make_session(shared, int4_gpu_layout="all")
    assert seen[-1] == "0" and os.environ["PYQUANT_INT4_SHUFFLE"] == "0"
    monkeypatch.setenv("PYQUANT_INT4_SHUFFLE", "all")  # the caller's explicit choice: not checked
    pq_ort.make_session(shared)
    assert seen[-1] == "all"

    with pytest.raises(ValueError, match="int4_gpu_layout='shuffled'"):
        pq_ort.make_session(model, int4_gpu_layout="shuffled")


def test_fp8_tile_names_mirror_the_op():
    """pyquant._cuda_knobs.FP8_SM90_TILES (used by bench_cuda.py and the device tests) lists the
    PYQUANT_FP8_SM90_TILE names that linear_fp8_op.cc reads, in the same order (the index is the
    variant number)."""
    from pyquant._cuda_knobs import FP8_SM90_TILES

    text = (REPO / "ort_ops" / "cuda" / "linear_fp8_op.cc").read_text()
    m = re.search(r'EnvChoice\("PYQUANT_FP8_SM90_TILE",\s*\{([^}]*)\}', text)
    assert m, "PYQUANT_FP8_SM90_TILE list not found in linear_fp8_op.cc"
    names = tuple(re.findall(r'"(\w+)"', m.group(1)))
    assert names == ("auto", *FP8_SM90_TILES)


def test_int4_tile_names_mirror_the_op():
    """pyquant._cuda_knobs.INT4_SM90_TILES lists the PYQUANT_INT4_SM90_TILE names that
    matmul_int4_op.cc reads, in order, and int4_gemm_sm90.h's named variant numbers (the default
    ping-pong rule's "p128", the rule-free "coop", the 192-token "w192" / "p192") are those names'
    indices."""
    from pyquant._cuda_knobs import INT4_SM90_TILES

    text = (REPO / "ort_ops" / "cuda" / "matmul_int4_op.cc").read_text()
    m = re.search(r'EnvChoice\("PYQUANT_INT4_SM90_TILE",\s*\{([^}]*)\}', text)
    assert m, "PYQUANT_INT4_SM90_TILE list not found in matmul_int4_op.cc"
    names = ("auto", *INT4_SM90_TILES)
    assert tuple(re.findall(r'"(\w+)"', m.group(1))) == names
    header = (REPO / "ort_ops" / "cuda" / "sm90" / "int4_gemm_sm90.h").read_text()
    named = (
        ("kInt4Sm90TilePingpong128", "p128"),
        ("kInt4Sm90TileCooperative", "coop"),
        ("kInt4Sm90TileWide192", "w192"),
        ("kInt4Sm90TilePingpong192", "p192"),
    )
    for const, name in named:
        v = re.search(rf"constexpr int {const} = (\d+);", header)
        assert v, f"{const} not found in int4_gemm_sm90.h"
        assert int(v.group(1)) == names.index(name), const


def test_fp8_gemv_names_match_their_constants():
    """The PYQUANT_FP8_GEMV names that linear_fp8_op.cc reads map to the indices that
    linear_fp8.h's constants name ("mmasplit", "staged", "nostaged", "tc", "notc"), and "tc1".."tcN"
    follow "tc" in order, one per tc GEMV configuration after the automatic one
    (kFp8GemvTcConfigs, linear_fp8_gemv.h): the launcher takes configuration = index - kFp8GemvTc."""
    text = (REPO / "ort_ops" / "cuda" / "linear_fp8_op.cc").read_text()
    m = re.search(r'EnvChoice\("PYQUANT_FP8_GEMV",\s*\{([^}]*)\}', text)
    assert m, "PYQUANT_FP8_GEMV list not found in linear_fp8_op.cc"
    names = re.findall(r'"(\w+)"', m.group(1))
    header = (REPO / "ort_ops" / "cuda" / "linear_fp8.h").read_text()
    for const, name in (
        ("kFp8GemvMmaSplit", "mmasplit"),
        ("kFp8GemvStaged", "staged"),
        ("kFp8GemvNoStaged", "nostaged"),
        ("kFp8GemvTc", "tc"),
        ("kFp8GemvNoTc", "notc"),
    ):
        v = re.search(rf"constexpr int {const} = (\d+);", header)
        assert v, f"{const} not found in linear_fp8.h"
        assert int(v.group(1)) == names.index(name), const
    gemv_h = (REPO / "ort_ops" / "cuda" / "linear_fp8_gemv.h").read_text()
    configs = int(re.search(r"constexpr int kFp8GemvTcConfigs = (\d+);", gemv_h).group(1))
    tc = names.index("tc")
    assert names[tc : tc + configs] == ["tc", *(f"tc{i}" for i in range(1, configs))]
