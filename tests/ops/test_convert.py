"""pyquant.convert: MatMulInt4 <-> com.microsoft.MatMulNBits, checked by running both ops in ORT."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pyquant import layout, reference
from pyquant.convert import (
    MS_DOMAIN,
    NBITS_OP,
    ConversionError,
    convert_file,
    from_matmulnbits,
    to_matmulnbits,
)
from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP
from tests.ops.graphs import ONNX_TYPE, fp8_model, int4_model, np_dtype, run

# (K, N, block_size): K % block_size != 0 in all but the first; odd n_blocks exercises the
# half-used last zero-point byte.
SHAPES = [(256, 40, 32), (200, 48, 32), (80, 33, 16), (300, 24, 128)]


def _ort_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """ORT alone, without our library, so that only its own MatMulNBits can run the node."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": x})[0]


def _weights(rng, k, n, bs, dtype, symmetric, with_bias):
    w = rng.standard_normal((n, k)).astype(np.float32)
    b, s, zp = layout.quantize_int4_rtn(w, bs, symmetric=symmetric)
    if not symmetric:
        zp = layout.pack_zero_points(rng.integers(0, 16, size=(n, layout.n_blocks(k, bs))).astype(np.uint8))
    # Padding codes equal to the zero point (what the converters write; quantize_int4_rtn pads with
    # 0), so that the original is already a fixed point of the conversion.
    b = _normalized_padding(b, k, bs, zp)
    s = s.astype(np_dtype(dtype))
    bias = rng.standard_normal(n).astype(np_dtype(dtype)) if with_bias else None
    return b, s, zp, bias


def _normalized_padding(b, k, bs, zp):
    n = b.shape[0]
    nb = layout.n_blocks(k, bs)
    codes = layout.unpack_int4(b, nb * bs)
    zps = layout.unpack_zero_points(zp, nb) if zp is not None else np.full((n, nb), 8, np.uint8)
    codes[:, k:] = zps[:, -1:]
    return layout.pack_int4(codes, bs)


def _inits(model: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...], bytes]]:
    return {
        t.name: (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())
        for t in model.graph.initializer
    }


def _domains(model: onnx.ModelProto) -> dict[str, int]:
    return {o.domain: o.version for o in model.opset_import}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "K{}_N{}_bs{}".format(*s))
def test_ours_and_ort_agree_with_reference(rng, dtype, symmetric, with_bias, shape):
    k, n, bs = shape
    b, s, zp, bias = _weights(rng, k, n, bs, dtype, symmetric, with_bias)
    ours = int4_model(b, s, k, n, bs, dtype=dtype, zero_points=zp, bias=bias, x_shape=("B", "S", None))
    nbits = to_matmulnbits(ours)

    node = nbits.graph.node[0]
    assert (node.domain, node.op_type, node.name) == (MS_DOMAIN, NBITS_OP, "int4_node")
    attrs = {a.name: a.i for a in node.attribute}
    assert attrs == {"K": k, "N": n, "bits": 4, "block_size": bs}
    if with_bias:
        assert list(node.input)[5] == "bias"  # MatMulNBits' bias slot: A, B, scales, zp, g_idx, bias
    assert _domains(nbits) == {"": 21, MS_DOMAIN: 1}

    x = rng.standard_normal((2, 3, k)).astype(np_dtype(dtype))
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    y_ort = _ort_run(nbits, x)
    y_ours = run(ours, x)
    reference.assert_within_limit(y_ort, y_ref, mag, dtype)
    reference.assert_within_limit(y_ours, y_ref, mag, dtype)

    # Our op on the model converted back.
    back = from_matmulnbits(nbits)
    reference.assert_within_limit(run(back, x), y_ref, mag, dtype)


@pytest.mark.parametrize("scales_flat", [False, True])
@pytest.mark.parametrize("symmetric", [True, False])
def test_round_trip_is_byte_identical(rng, scales_flat, symmetric):
    k, n, bs = 200, 48, 32
    b, s, zp, bias = _weights(rng, k, n, bs, "float32", symmetric, True)
    if scales_flat:
        s = s.reshape(-1)
    ours = int4_model(b, s, k, n, bs, zero_points=zp, bias=bias)
    nbits = to_matmulnbits(ours)
    back = from_matmulnbits(nbits)
    assert _inits(back) == _inits(ours) == _inits(nbits)
    assert back.graph.node[0] == ours.graph.node[0]
    assert _domains(back) == _domains(ours)
    # And the other way: nbits -> ours -> nbits.
    assert to_matmulnbits(back) == nbits


def test_input_is_not_modified(rng):
    b, s, zp, _ = _weights(rng, 200, 16, 32, "float32", False, False)
    ours = int4_model(b, s, 200, 16, 32, zero_points=zp)
    before = ours.SerializeToString()
    to_matmulnbits(ours)
    assert ours.SerializeToString() == before


def test_padding_codes_are_normalized(rng):
    """Garbage in the last block's padding is ignored by both ops; the converter writes the zero
    point there (docs/ops.md), after which conversions are byte-stable."""
    k, n, bs = 200, 24, 64
    b, s, zp, _ = _weights(rng, k, n, bs, "float32", False, False)
    codes = layout.unpack_int4(b, layout.n_blocks(k, bs) * bs)
    codes[:, k:] = rng.integers(0, 16, size=codes[:, k:].shape)
    b_garbage = layout.pack_int4(codes, bs)
    ours = int4_model(b_garbage, s, k, n, bs, zero_points=zp)
    nbits = to_matmulnbits(ours)
    assert _inits(nbits)["B"][2] == _normalized_padding(b_garbage, k, bs, zp).tobytes()
    x = rng.standard_normal((4, k)).astype(np.float32)
    y_ref, mag = reference.matmul_int4_ref(x, b_garbage, s, k, n, bs, zp)
    reference.assert_within_limit(_ort_run(nbits, x), y_ref, mag, "float32")
    reference.assert_within_limit(run(ours, x), y_ref, mag, "float32")
    assert _inits(from_matmulnbits(nbits)) == _inits(nbits)


def test_shared_weight_is_copied_not_rewritten(rng):
    """A B read by two nodes, one of which needs its padding rewritten, keeps its bytes for the other."""
    k, n, bs = 40, 16, 32
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    codes = layout.unpack_int4(b, 64)
    codes[:, k:] = 3
    b_garbage = layout.pack_int4(codes, bs)
    m = int4_model(b_garbage, s, k, n, bs)
    other = helper.make_node("Identity", ["B"], ["B_copy"], name="keep_b")
    m.graph.node.append(other)
    m.graph.output.append(helper.make_tensor_value_info("B_copy", TensorProto.UINT8, list(b.shape)))
    nbits = to_matmulnbits(m)
    inits = _inits(nbits)
    assert inits["B"][2] == b_garbage.tobytes()
    node = nbits.graph.node[0]
    assert (
        node.input[1] != "B"
        and inits[node.input[1]][2] == _normalized_padding(b_garbage, k, bs, None).tobytes()
    )


def _nbits_model(b, s, k, n, bs, dtype="float32", zp=None, g_idx=None, bias=None, **extra_attrs):
    t = ONNX_TYPE[dtype]
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(s, "scales")]
    inputs = ["X", "B", "scales", "", "", ""]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "zp"))
        inputs[3] = "zp"
    if g_idx is not None:
        inits.append(numpy_helper.from_array(g_idx.astype(np.int32), "g_idx"))
        inputs[4] = "g_idx"
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        inputs[5] = "bias"
    while inputs[-1] == "":
        inputs.pop()
    attrs = {"K": k, "N": n, "bits": 4, "block_size": bs, **extra_attrs}
    node = helper.make_node(NBITS_OP, inputs, ["Y"], domain=MS_DOMAIN, name="nb", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", t, ["M", k])],
        [helper.make_tensor_value_info("Y", t, ["M", n])],
        initializer=inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)], ir_version=10
    )


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_float_integer_zero_points_become_packed(rng, dtype):
    k, n, bs = 80, 20, 16  # odd n_blocks
    nb = layout.n_blocks(k, bs)
    b, s, _, _ = _weights(rng, k, n, bs, dtype, True, False)
    zp_int = rng.integers(0, 16, size=(n, nb)).astype(np.uint8)
    b = _normalized_padding(b, k, bs, layout.pack_zero_points(zp_int))
    nbits = _nbits_model(b, s.reshape(n, nb), k, n, bs, dtype, zp=zp_int.astype(np_dtype(dtype)))
    ours = from_matmulnbits(nbits)
    node = ours.graph.node[0]
    assert (node.domain, node.op_type, node.name) == (DOMAIN, INT4_OP, "nb")
    assert _domains(ours) == {"": 21, DOMAIN: 1}
    zp_t = {t.name: t for t in ours.graph.initializer}[node.input[3]]
    assert zp_t.data_type == TensorProto.UINT8
    np.testing.assert_array_equal(numpy_helper.to_array(zp_t), layout.pack_zero_points(zp_int))

    x = rng.standard_normal((5, k)).astype(np_dtype(dtype))
    zp_packed = layout.pack_zero_points(zp_int)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp_packed)
    reference.assert_within_limit(_ort_run(nbits, x), y_ref, mag, dtype)
    reference.assert_within_limit(run(ours, x), y_ref, mag, dtype)


def test_trivial_g_idx_is_accepted(rng):
    k, n, bs = 256, 16, 32
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    nbits = _nbits_model(b, s, k, n, bs, g_idx=np.arange(k) // bs)
    ours = from_matmulnbits(nbits)
    assert list(ours.graph.node[0].input) == ["X", "B", "scales"]
    x = rng.standard_normal((3, k)).astype(np.float32)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs)
    reference.assert_within_limit(run(ours, x), y_ref, mag, "float32")


def test_accuracy_level_and_split_bias(rng):
    k, n, bs = 128, 32, 32
    b, s, zp, bias = _weights(rng, k, n, bs, "float32", False, True)
    ours = int4_model(b, s, k, n, bs, zero_points=zp, bias=bias)

    def level(model):  # the converted node's accuracy_level, None when absent
        return {a.name: a.i for a in model.graph.node[0].attribute}.get("accuracy_level")

    nbits = to_matmulnbits(ours, accuracy_level=4)
    assert level(nbits) == 4
    assert level(to_matmulnbits(ours)) is None  # level 0 stays implicit
    split = to_matmulnbits(ours, split_bias=True)
    assert [nd.op_type for nd in split.graph.node] == [NBITS_OP, "Add"]
    assert len(split.graph.node[0].input) == 4
    x = rng.standard_normal((3, k)).astype(np.float32)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    reference.assert_within_limit(_ort_run(split, x), y_ref, mag, "float32")
    # accuracy_level is kept on the way back (MatMulInt4 has it too); only the attribute differs.
    back = from_matmulnbits(nbits)
    assert _inits(back) == _inits(ours)
    assert level(back) == 4
    attrs = {a.name: a.i for a in ours.graph.node[0].attribute}
    assert {a.name: a.i for a in back.graph.node[0].attribute} == {**attrs, "accuracy_level": 4}
    bare = [onnx.NodeProto(), onnx.NodeProto()]
    for copy, node in zip(bare, (back.graph.node[0], ours.graph.node[0]), strict=True):
        copy.CopyFrom(node)
        del copy.attribute[:]
    assert bare[0] == bare[1]
    # MatMulInt4's own level goes to MatMulNBits unless the argument overrides it.
    ours4 = int4_model(
        b,
        s,
        k,
        n,
        bs,
        zero_points=zp,
        bias=bias,
        attrs={"K": k, "N": n, "block_size": bs, "accuracy_level": 4},
    )
    assert level(to_matmulnbits(ours4)) == 4
    assert level(to_matmulnbits(ours4, accuracy_level=0)) == 0
    assert level(to_matmulnbits(ours4, accuracy_level=1)) == 1
    assert level(to_matmulnbits(ours4, split_bias=True)) == 4
    assert to_matmulnbits(from_matmulnbits(nbits)).graph.node[0] == nbits.graph.node[0]
    # Levels 1-3 (float activations for MatMulInt4) are kept too; an explicit 0 is not written.
    assert level(from_matmulnbits(to_matmulnbits(ours, accuracy_level=2))) == 2
    assert level(to_matmulnbits(from_matmulnbits(to_matmulnbits(ours, accuracy_level=2)))) == 2
    assert from_matmulnbits(to_matmulnbits(ours, accuracy_level=0)).graph.node[0] == ours.graph.node[0]
    with pytest.raises(ValueError, match="accuracy_level"):
        to_matmulnbits(ours, accuracy_level=5)
    bad = to_matmulnbits(ours)
    bad.graph.node[0].attribute.append(helper.make_attribute("accuracy_level", 7))
    with pytest.raises(ConversionError, match="accuracy_level=7"):
        from_matmulnbits(bad)


@pytest.mark.parametrize("scales_shape,want", [("2d", (40, 7)), ("flat", (280,))])
def test_scales_shape_option(rng, scales_shape, want):
    k, n, bs = 200, 40, 32
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    nbits = to_matmulnbits(
        int4_model(b, s.reshape(-1) if want == (40, 7) else s, k, n, bs), scales_shape=scales_shape
    )
    assert _inits(nbits)["scales"][1] == want
    x = rng.standard_normal((2, k)).astype(np.float32)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs)
    reference.assert_within_limit(_ort_run(nbits, x), y_ref, mag, "float32")


def test_other_nodes_and_domains_untouched(rng):
    """A LinearFp8 node stays, so the pyquant import stays too."""
    k, n, bs = 64, 16, 32
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    m = int4_model(b, s, k, n, bs)
    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((8, n)).astype(np.float32))
    f = fp8_model(wq, ws)
    fnode = f.graph.node[0]
    fnode.input[0] = "Y"
    fnode.output[0] = "Z"
    m.graph.node.append(fnode)
    m.graph.initializer.extend(f.graph.initializer)
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["M", 8]))
    nbits = to_matmulnbits(m)
    assert [(nd.domain, nd.op_type) for nd in nbits.graph.node] == [(MS_DOMAIN, NBITS_OP), (DOMAIN, FP8_OP)]
    assert _domains(nbits) == {"": 21, DOMAIN: 1, MS_DOMAIN: 1}
    assert nbits.graph.node[1] == fnode
    back = from_matmulnbits(nbits)
    assert _domains(back) == {"": 21, DOMAIN: 1}
    assert back.graph == m.graph


def test_convert_file_round_trip(rng, tmp_path):
    k, n, bs = 200, 48, 32
    b, s, zp, bias = _weights(rng, k, n, bs, "float16", False, True)
    ours = int4_model(b, s, k, n, bs, dtype="float16", zero_points=zp, bias=bias)
    src, mid, dst = tmp_path / "ours.onnx", tmp_path / "nbits.onnx", tmp_path / "back.onnx"
    onnx.save(ours, src)
    rep = convert_file(src, mid, "to-matmulnbits")
    assert len(rep.converted) == 1 and "int4_node" in str(rep.converted[0])
    convert_file(mid, dst, "from-matmulnbits")
    assert _inits(onnx.load(dst)) == _inits(ours)
    # External data survives: a source with external weights is written with external weights.
    ext = tmp_path / "ext.onnx"
    onnx.save(ours, ext, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    convert_file(ext, tmp_path / "ext_nbits.onnx", "to-matmulnbits")
    assert (tmp_path / "ext_nbits.onnx.data").exists()
    x = rng.standard_normal((2, k)).astype(np.float16)
    sess = ort.InferenceSession(str(tmp_path / "ext_nbits.onnx"), providers=["CPUExecutionProvider"])
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    reference.assert_within_limit(sess.run(None, {"X": x})[0], y_ref, mag, "float16")
    with pytest.raises(ValueError, match="direction"):
        convert_file(src, dst, "sideways")


# --- what cannot be converted losslessly ---------------------------------------------------------


def _base_nbits(rng, k=256, n=16, bs=32, **kw):
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    return _nbits_model(b, s, k, n, bs, **kw)


def test_error_nontrivial_g_idx(rng):
    g = np.random.default_rng(1).permutation(np.arange(256) // 32)
    with pytest.raises(ConversionError, match=r"node 'nb'.*g_idx"):
        from_matmulnbits(_base_nbits(rng, g_idx=g))


def test_error_bits_not_4(rng):
    m = _base_nbits(rng)
    for a in m.graph.node[0].attribute:
        if a.name == "bits":
            a.i = 8
    with pytest.raises(ConversionError, match=r"node 'nb'.*bits=8"):
        from_matmulnbits(m)


@pytest.mark.parametrize("bs", [512, 24])
def test_error_block_size(rng, bs):
    m = _base_nbits(rng)
    for a in m.graph.node[0].attribute:
        if a.name == "block_size":
            a.i = bs
    with pytest.raises(ConversionError, match=rf"node 'nb'.*block_size={bs}"):
        from_matmulnbits(m)


def test_error_non_integer_float_zero_points(rng):
    k, n, bs = 64, 8, 32
    b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
    zp = np.full((n, 2), 8.0, np.float32)
    zp[3, 1] = 7.5
    with pytest.raises(ConversionError, match=r"node 'nb'.*zero_points"):
        from_matmulnbits(_nbits_model(b, s, k, n, bs, zp=zp))
    zp[3, 1] = 16.0
    with pytest.raises(ConversionError, match=r"node 'nb'.*0\.\.15"):
        from_matmulnbits(_nbits_model(b, s, k, n, bs, zp=zp))


def test_error_prepacked_and_unknown_attributes(rng):
    with pytest.raises(ConversionError, match=r"node 'nb'.*weight_prepacked"):
        from_matmulnbits(_base_nbits(rng, weight_prepacked=1))
    with pytest.raises(ConversionError, match=r"node 'nb'.*unknown attribute 'new_thing'"):
        from_matmulnbits(_base_nbits(rng, new_thing=1))


def test_error_non_initializer_weight_needing_rewrite(rng):
    """B as a graph input: fine when nothing must be rewritten, an error when the padding must be."""
    for k, ok in [(256, True), (200, False)]:
        n, bs = 16, 32
        b, s, _, _ = _weights(rng, k, n, bs, "float32", True, False)
        m = int4_model(b, s, k, n, bs)
        b_init = [t for t in m.graph.initializer if t.name == "B"][0]
        m.graph.initializer.remove(b_init)
        m.graph.input.append(helper.make_tensor_value_info("B", TensorProto.UINT8, list(b.shape)))
        if ok:
            assert to_matmulnbits(m).graph.node[0].op_type == NBITS_OP
        else:
            with pytest.raises(ConversionError, match=r"node 'int4_node'.*not a constant initializer"):
                to_matmulnbits(m)


def test_unnamed_node_is_described_by_output(rng):
    m = _base_nbits(rng, g_idx=np.random.default_rng(1).permutation(np.arange(256) // 32))
    m.graph.node[0].name = ""
    with pytest.raises(ConversionError, match=r"<unnamed>.*output 'Y'"):
        from_matmulnbits(m)


@pytest.mark.parametrize("m", [1, 300])
def test_large_layer_agrees(rng, m):
    """A layer big enough for the CPU kernel's multi-panel tasks (N=1000: 63 panels, grouped) and two
    256-row tasks; ours and ORT's MatMulNBits on the converted model against the reference."""
    k, n, bs = 600, 1000, 32
    b, s, zp, bias = _weights(rng, k, n, bs, "float32", False, True)
    ours = int4_model(b, s, k, n, bs, zero_points=zp, bias=bias)
    x = rng.standard_normal((m, k)).astype(np.float32)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    reference.assert_within_limit(run(ours, x), y_ref, mag, "float32")
    reference.assert_within_limit(_ort_run(to_matmulnbits(ours), x), y_ref, mag, "float32")
