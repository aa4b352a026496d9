"""Property tests (hypothesis) over attributes, shapes, dtypes, special scale values and corrupted
models: every case either matches the float64 reference or fails with an ORT error; never a crash.

CI runs a slice (PYQUANT_FUZZ_EXAMPLES, default 40 per test); `tools/fuzz_long.sh` runs >= 10,000.
"""

import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyquant import layout, reference
from pyquant.ops_spec import FP8_OP
from tests.ops.graphs import ORT_ERRORS, fp8_model, int4_model, np_dtype, run

EXAMPLES = int(os.environ.get("PYQUANT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SPECIAL = [0.0, np.inf, -np.inf, np.nan, 1e-40, 6e-8]


@st.composite
def int4_cases(draw):
    k = draw(st.integers(1, 600))
    n = draw(st.integers(1, 40))
    bs = draw(st.sampled_from([16, 32, 64, 128, 256]))
    m = draw(st.integers(0, 9))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    sym = draw(st.booleans())
    bias = draw(st.booleans())
    specials = draw(st.lists(st.sampled_from(SPECIAL), max_size=3))
    seed = draw(st.integers(0, 2**32 - 1))
    return k, n, bs, m, dtype, sym, bias, specials, seed


@FUZZ
@given(int4_cases())
def test_int4_fuzz(case):
    k, n, bs, m, dtype, sym, with_bias, specials, seed = case
    rng = np.random.default_rng(seed)
    nb = layout.n_blocks(k, bs)
    q = rng.integers(0, 16, size=(n, k)).astype(np.uint8)
    b = layout.pack_int4(q, bs)
    s = (rng.standard_normal((n, nb)) * 0.1).astype(np.float32)
    for v in specials:  # drop special values into random scales
        s[rng.integers(n), rng.integers(nb)] = v
    s = s.astype(np_dtype(dtype))
    zp = None if sym else layout.pack_zero_points(rng.integers(0, 16, size=(n, nb)).astype(np.uint8))
    bias = rng.standard_normal(n).astype(np_dtype(dtype)) if with_bias else None
    x = rng.standard_normal((m, k)).astype(np_dtype(dtype))
    y = run(int4_model(b, s, k, n, bs, dtype=dtype, zero_points=zp, bias=bias), x)
    y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs, zp, bias)
    finite = np.isfinite(y_ref)
    assert y.shape == (m, n)
    # Non-finite reference values: same class (NaN vs +-inf) is not guaranteed once inf - inf
    # can appear in a different summation order, but a finite reference must give that value.
    reference.assert_within_limit(
        np.where(finite, y.astype(np.float64), 0), np.where(finite, y_ref, 0), np.where(finite, mag, 0), dtype
    )
    assert not np.isfinite(y.astype(np.float64)[~finite]).any()


@st.composite
def fp8_cases(draw):
    k = draw(st.integers(1, 400))
    n = draw(st.integers(1, 40))
    m = draw(st.integers(0, 9))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    block = draw(st.sampled_from([0, 16, 32, 128]))
    static = draw(st.sampled_from([None, 1e-3, 0.05, 1.0, 300.0]))
    x_scale_mag = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    zero_row = draw(st.booleans())
    seed = draw(st.integers(0, 2**32 - 1))
    return k, n, m, dtype, block, static, x_scale_mag, zero_row, seed


@FUZZ
@given(fp8_cases())
def test_fp8_fuzz(case):
    k, n, m, dtype, block, static, mag_x, zero_row, seed = case
    rng = np.random.default_rng(seed)
    wq, ws = layout.quantize_weight_fp8(rng.standard_normal((n, k)).astype(np.float32), block)
    x = (rng.standard_normal((m, k)) * mag_x).astype(np_dtype(dtype))
    if zero_row and m:
        x[0] = 0
    y = run(fp8_model(wq, ws, dtype, block, static), x)
    y_ref, mag = reference.linear_fp8_ref(x, wq, ws, block, static)
    reference.assert_within_limit(y, y_ref, mag, dtype, op=FP8_OP)


# --- corrupted models ---------------------------------------------------------------------------


def _int4_small(rng):
    k, n, bs = 64, 8, 32
    b, s, zp = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs, symmetric=False)
    return int4_model(b, s, k, n, bs, zero_points=zp, bias=np.zeros(n, np.float32)), k


@FUZZ
@given(
    st.sampled_from(["B", "scales", "zero_points", "bias"]),
    st.sampled_from(["truncate", "extend", "reshape", "retype"]),
    st.integers(0, 2**32 - 1),
)
def test_corrupted_int4_initializers_fail_cleanly(name, how, seed):
    rng = np.random.default_rng(seed)
    model, k = _int4_small(rng)
    init = next(i for i in model.graph.initializer if i.name == name)
    arr = onnx.numpy_helper.to_array(init)
    if how == "truncate":  # raw bytes shorter than the declared dims
        init.raw_data = init.raw_data[: max(0, len(init.raw_data) // 2)]
    elif how == "extend":
        init.raw_data = init.raw_data + b"\x00" * 8
    elif how == "reshape":
        new = arr.reshape(-1)[: max(1, arr.size - 1)].copy()
        init.CopyFrom(onnx.numpy_helper.from_array(new, name))
    else:
        new = arr.astype(np.int32) if arr.dtype == np.uint8 else arr.astype(np.float64)
        init.CopyFrom(onnx.numpy_helper.from_array(new, name))
    with pytest.raises(ORT_ERRORS):
        run(model, rng.standard_normal((2, k)).astype(np.float32))


@FUZZ
@given(st.integers(-3, 600), st.integers(-3, 70), st.integers(-1, 300), st.integers(0, 2**32 - 1))
def test_int4_arbitrary_attributes(k_attr, n_attr, bs_attr, seed):
    """Attributes that disagree with the tensors must error; agreeing ones must compute right."""
    rng = np.random.default_rng(seed)
    k, n, bs = 96, 12, 32
    b, s, _ = layout.quantize_int4_rtn(rng.standard_normal((n, k)), bs)
    model = int4_model(
        b, s, k, n, bs, attrs={"K": k_attr, "N": n_attr, "block_size": bs_attr}, x_shape=("M", "K")
    )
    x = rng.standard_normal((3, k)).astype(np.float32)
    if (k_attr, n_attr, bs_attr) == (k, n, bs):
        y_ref, mag = reference.matmul_int4_ref(x, b, s, k, n, bs)
        reference.assert_within_limit(run(model, x), y_ref, mag, "float32")
    else:
        with pytest.raises(ORT_ERRORS):
            run(model, x)
