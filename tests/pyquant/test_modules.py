"""Quantized modules and the quantize() pass: numerics against pyquant.reference, dtypes, state_dict,
layer selection and error messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from pyquant import reference
from pyquant.algorithms import Int4Packed, register_weight_quantizer
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig, config_from_dict
from pyquant.modules import Fp8Linear, Int4Linear
from pyquant.ops_spec import FP8_OP, INT4_OP
from pyquant.quantize import load_quantized, quantize, save_quantized

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Mlp(nn.Module):
    def __init__(self, k: int = 96, h: int = 80, n: int = 24) -> None:
        super().__init__()
        self.up = nn.Linear(k, h)
        self.down = nn.Linear(h, n, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().numpy()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("block_size,symmetric", [(16, True), (32, False), (64, True), (128, False)])
def test_int4_linear_matches_reference(dtype: str, block_size: int, symmetric: bool) -> None:
    torch.manual_seed(0)
    lin = nn.Linear(200, 48)  # K % block_size != 0 for every block size: padded last block
    m = quantize(nn.Sequential(lin), Int4Config(block_size, symmetric)).to(DTYPES[dtype])
    q = m[0]
    assert isinstance(q, Int4Linear) and q.scales.dtype == DTYPES[dtype] and q.qweight.dtype == torch.uint8
    x = torch.randn(3, 5, 200).to(DTYPES[dtype])
    y = q(x)
    assert y.dtype == DTYPES[dtype] and y.shape == (3, 5, 48)
    zp = None if q.zero_points is None else q.zero_points.numpy()
    y_ref, mag = reference.matmul_int4_ref(
        _np(x), q.qweight.numpy(), _np(q.scales), 200, 48, block_size, zp, _np(q.bias)
    )
    reference.assert_within_limit(_np(y), y_ref, mag, dtype, INT4_OP)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize(
    "wbs,activation",
    [(0, "dynamic"), (128, "dynamic"), (32, "static"), (0, "static"), (0, "none"), (64, "none")],
)
def test_fp8_linear_matches_reference(dtype: str, wbs: int, activation: str) -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(200, 48))
    calib = [torch.randn(4, 200) for _ in range(3)]
    quantize(m, Fp8Config(wbs, activation), calibration_data=calib)
    m = m.to(DTYPES[dtype])
    q = m[0]
    assert q.weight.dtype == torch.float8_e4m3fn and q.w_scale.dtype == torch.float32  # pinned by _apply
    if activation == "static":
        amax = max(float(c.abs().max()) for c in calib)
        assert float(q.x_scale) == pytest.approx(amax / 448, rel=1e-6)
    x = torch.randn(7, 200).to(DTYPES[dtype])
    y = q(x)
    xs = None if q.x_scale is None else float(q.x_scale)
    w8 = q.weight.view(torch.uint8).numpy().view(reference.layout.FP8_DTYPE)
    wo = activation == "none"
    assert q.weight_only == wo and (q.x_scale is None or not wo)
    y_ref, mag = reference.linear_fp8_ref(_np(x), w8, q.w_scale.numpy(), wbs, xs, _np(q.bias), weight_only=wo)
    reference.assert_within_limit(_np(y), y_ref, mag, dtype, FP8_OP)


def test_fp8_weight_only_error_is_the_weights_alone() -> None:
    """Weight-only FP8 differs from x @ W_dequantized^T by float32 rounding only; W8A8 also rounds x."""
    torch.manual_seed(0)
    m = quantize(nn.Sequential(nn.Linear(256, 64)), Fp8Config(activation="none"))
    q = m[0]
    x = torch.randn(9, 256)
    exact = x.double() @ q.dequantized_weight().double().t() + q.bias.double()
    assert (q(x).double() - exact).abs().max() < 1e-4
    w8a8 = quantize(nn.Sequential(nn.Linear(256, 64)), Fp8Config())
    w8a8[0].load_state_dict(q.state_dict(), strict=False)
    assert (w8a8[0](x).double() - exact).abs().max() > 1e-3
    with pytest.raises(ValueError, match="weight_only takes no x_scale"):
        torch.ops.pyquant.linear_fp8(x, q.weight, q.w_scale, torch.tensor(1.0), None, 0, True)
    with pytest.raises(ValueError, match="calibrates a static activation scale"):
        Fp8Config(activation="none", calibration="mse")


def test_fp8_activation_quantization_is_bit_exact() -> None:
    from pyquant import layout, torch_ops

    x = np.random.default_rng(0).standard_normal((6, 64)).astype(np.float32) * 3
    x[0, 1] = np.nan
    x[1] = 0
    x[2, 2] = np.inf
    x[3] *= 1e5
    x[4, :] = 1e-30
    xq, sx = layout.quantize_activations_fp8(x)
    tq, tsx = torch_ops.quantize_activations_fp8(torch.from_numpy(x), None)
    assert np.array_equal(tq.view(torch.uint8).numpy(), xq.view(np.uint8))
    assert np.array_equal(tsx.numpy()[:, 0], sx, equal_nan=True)
    xq, _ = layout.quantize_activations_fp8(x, 0.01)
    tq, _ = torch_ops.quantize_activations_fp8(torch.from_numpy(x), torch.tensor(0.01))
    assert np.array_equal(tq.view(torch.uint8).numpy(), xq.view(np.uint8))


def test_half_converts_scales_and_module_uses_them() -> None:
    torch.manual_seed(0)
    m = quantize(Mlp(), QuantizeConfig(default=Int4Config(32), overrides={"down": Fp8Config(0)}))
    x = torch.randn(4, 96)
    y32 = m(x)
    m.half()
    assert m.up.scales.dtype == torch.float16 and m.up.bias.dtype == torch.float16
    assert m.down.weight.dtype == torch.float8_e4m3fn and m.down.w_scale.dtype == torch.float32
    y16 = m(x.half())
    assert y16.dtype == torch.float16
    torch.testing.assert_close(y16.float(), y32, atol=0.05, rtol=0.05)
    with pytest.raises(ValueError, match="'up'.*float32 differs"):
        m(x)


def test_state_dict_roundtrip(tmp_path) -> None:
    torch.manual_seed(0)
    cfg = QuantizeConfig(default=Int4Config(32, symmetric=False), overrides={"down": Fp8Config(16, "static")})
    m = quantize(Mlp(), cfg, calibration_data=[torch.randn(8, 96)])
    x = torch.randn(4, 96)
    y = m(x)
    fresh = quantize(Mlp(), cfg, calibration_data=[torch.randn(8, 96)])
    fresh.load_state_dict(m.state_dict())
    torch.testing.assert_close(fresh(x), y, atol=0, rtol=0)
    torch.save(m.state_dict(), tmp_path / "sd.pt")
    assert set(torch.load(tmp_path / "sd.pt")) >= {
        "up.qweight",
        "up.scales",
        "up.zero_points",
        "down.weight",
        "down.w_scale",
        "down.x_scale",
    }
    save_quantized(m, tmp_path / "q.pt")
    loaded = load_quantized(Mlp(), tmp_path / "q.pt")
    assert isinstance(loaded.up, Int4Linear) and isinstance(loaded.down, Fp8Linear)
    torch.testing.assert_close(loaded(x), y, atol=0, rtol=0)
    assert config_from_dict(cfg.to_dict()) == cfg


def test_layer_selection_and_summary(caplog) -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(64, 64)
            self.b = nn.Linear(64, 64)
            self.head = nn.Linear(64, 10)
            self.tiny = nn.Linear(8, 8)

    net = Net()
    cfg = QuantizeConfig(
        default=Int4Config(32),
        exclude=["head"],
        overrides={"b": Fp8Config()},
        filter=lambda name, mod: name != "zzz",
    )
    with caplog.at_level("WARNING", logger="pyquant"):
        quantize(net, cfg)
    assert isinstance(net.a, Int4Linear) and isinstance(net.b, Fp8Linear)
    assert type(net.head) is nn.Linear and type(net.tiny) is nn.Linear
    assert "in_features=8 < block_size=32" in net.pyquant_summary.skipped["tiny"]
    assert "'tiny'" in caplog.text
    net2 = Net()
    quantize(net2, QuantizeConfig(default=Int4Config(32), include=["a"], filter=lambda n, m: False))
    assert type(net2.a) is nn.Linear


def test_clear_errors() -> None:
    with pytest.raises(ValueError, match="power of two"):
        Int4Config(block_size=48)
    with pytest.raises(ValueError, match="power of two"):
        Int4Config(block_size=512)
    with pytest.raises(ValueError, match="weight_block_size"):
        Fp8Config(weight_block_size=8)
    with pytest.raises(ValueError, match="activation"):
        Fp8Config(activation="per-tensor")
    m = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
    with pytest.raises(ValueError, match="'1'.*LayerNorm is not an nn.Linear"):
        quantize(m, QuantizeConfig(overrides={"1": Int4Config(32)}))
    with pytest.raises(ValueError, match="no module of that name"):
        quantize(m, QuantizeConfig(overrides={"2": Int4Config(32)}))
    with pytest.raises(ValueError, match="'0'.*calibration"):
        quantize(m, Fp8Config(activation="static"))
    with pytest.raises(ValueError, match="'0'.*in_features=64 < block_size=128"):
        quantize(m, QuantizeConfig(overrides={"0": Int4Config(128)}))
    with pytest.raises(ValueError, match="no int4 weight quantizer named 'no-such-algo'"):
        quantize(m, Int4Config(32, algorithm="no-such-algo"))
    q = quantize(nn.Sequential(nn.Linear(64, 64)), Int4Config(32))
    with pytest.raises(ValueError, match=r"'0'.*expected input \[..., 64\]"):
        q(torch.randn(2, 63))
    with pytest.raises(ValueError, match="'0'.*int32"):
        q(torch.ones(2, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="root module"):
        quantize(nn.Linear(64, 64), Int4Config(32))


def test_algorithm_registry_plugs_in() -> None:
    seen = {}

    @register_weight_quantizer("int4", "test-zero", needs={"abs_mean", "hessian"})
    def zero(weight, config, stats):  # noqa: ANN001, ANN202
        seen["stats"] = stats
        n, k = weight.shape
        nb = -(-k // config.block_size)
        return Int4Packed(
            torch.full((n, nb, config.block_size // 2), 0x88, dtype=torch.uint8), torch.ones(n, nb)
        )

    m = nn.Sequential(nn.Linear(32, 16, bias=False))
    quantize(
        m, Int4Config(16, algorithm="test-zero"), calibration_data=[torch.randn(5, 32), torch.randn(3, 32)]
    )
    st = seen["stats"]
    assert st.n_tokens == 8 and st.abs_mean.shape == (32,) and st.hessian.shape == (32, 32)
    assert torch.count_nonzero(m(torch.randn(2, 32))) == 0  # codes 8 - zero point 8 = 0

    @register_weight_quantizer("int4", "test-bad")
    def bad(weight, config, stats):  # noqa: ANN001, ANN202
        return Int4Packed(torch.zeros(1, dtype=torch.uint8), torch.ones(1))

    with pytest.raises(ValueError, match="'0'.*qweight must be"):
        quantize(nn.Sequential(nn.Linear(32, 16)), Int4Config(16, algorithm="test-bad"))


def test_torch_export_sees_custom_ops() -> None:
    m = quantize(Mlp(), QuantizeConfig(default=Int4Config(32), overrides={"down": Fp8Config(16)}))
    ep = torch.export.export(m, (torch.randn(3, 96),), dynamic_shapes=({0: torch.export.Dim("b")},))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "pyquant.matmul_int4.default" in targets and "pyquant.linear_fp8.default" in targets


# --- accuracy_level 4: int8 activations (docs/ops.md "Int8 activations") -------------------------


def _int4_layer(dtype: str, block_size: int, symmetric: bool, level: int = 4, k: int = 200) -> Int4Linear:
    torch.manual_seed(0)
    m = quantize(nn.Sequential(nn.Linear(k, 48)), Int4Config(block_size, symmetric, accuracy_level=level))
    return m.to(DTYPES[dtype])[0]


def _ref(q: Int4Linear, x: torch.Tensor, level: int) -> tuple[np.ndarray, np.ndarray]:
    zp = None if q.zero_points is None else q.zero_points.numpy()
    bias = None if q.bias is None else _np(q.bias)
    return reference.matmul_int4_ref(
        _np(x),
        q.qweight.numpy(),
        _np(q.scales),
        q.in_features,
        q.out_features,
        q.block_size,
        zp,
        bias,
        accuracy_level=level,
    )


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("block_size,symmetric", [(16, True), (32, False), (128, True), (128, False)])
def test_int4_int8_activations_match_reference(dtype: str, block_size: int, symmetric: bool) -> None:
    q = _int4_layer(dtype, block_size, symmetric)  # K = 200: a short last block for every block size
    assert q.config.accuracy_level == 4
    x = (torch.randn(3, 5, 200) * torch.logspace(-2, 2, 200)).to(DTYPES[dtype])  # blocks of unlike ranges
    y = q(x)
    assert y.dtype == DTYPES[dtype] and y.shape == (3, 5, 48)
    y_ref, mag = _ref(q, x, 4)
    reference.assert_within_limit(_np(y), y_ref, mag, dtype, INT4_OP)
    # the op itself, called with the level as a keyword
    y_kw = torch.ops.pyquant.matmul_int4(
        x, q.qweight, q.scales, q.zero_points, q.bias, 200, 48, block_size, accuracy_level=4
    )
    assert torch.equal(y_kw, y)


def test_int8_activations_chunked_block_dots(monkeypatch) -> None:
    """The torch op sums the per-block dots in chunks of blocks (memory bound); any chunking is in
    the limit (the summation order is implementation-defined)."""
    from pyquant import torch_ops

    q = _int4_layer("float32", 16, False, k=300)
    x = torch.randn(7, 300)
    y = q(x)
    monkeypatch.setattr(torch_ops, "_INT8_DOT_CHUNK_ELEMS", 7 * 48 * 3)  # 3 blocks a chunk, 19 blocks
    y3 = q(x)
    y_ref, mag = _ref(q, x, 4)
    reference.assert_within_limit(_np(y), y_ref, mag, "float32", INT4_OP)
    reference.assert_within_limit(_np(y3), y_ref, mag, "float32", INT4_OP)


@pytest.mark.parametrize("k,block_size", [(200, 16), (200, 32), (300, 128), (256, 64), (17, 16)])
def test_int8_activation_quantization_is_bit_exact(k: int, block_size: int) -> None:
    from pyquant import torch_ops

    rng = np.random.default_rng(k + block_size)
    x = (rng.standard_normal((9, k)) * 3).astype(np.float32)
    x[0, 1] = np.nan
    x[1] = 0
    x[2, k - 1] = np.inf  # in the (short) last block only
    x[3] *= 1e5
    x[4] = 1e-30
    x[5, :] = rng.integers(-100, 100, k) + 0.5  # amax 127 below: inv = 1, so x * inv are exact .5 ties
    x[5, ::block_size] = 127
    x[6, : min(k, block_size)] = 0  # one all-zero block in an otherwise non-zero row
    x[7, 0] = -np.inf
    with np.errstate(over="ignore"):
        x16 = x.astype(np.float16)  # row 3 overflows to +-inf: more non-finite blocks
    for xin in (x, x16):
        xq, s_x = reference.quantize_activations_int8_ref(xin, k, block_size)
        nb = -(-k // block_size)
        assert xq.dtype == np.int32 and xq.shape == (9, nb * block_size) and s_x.dtype == np.float32
        assert np.all(np.abs(xq) <= 127) and np.all(xq[:, k:] == 0)
        tq, tsx = torch_ops.quantize_activations_int8(torch.from_numpy(xin), k, block_size)
        assert tq.dtype == torch.float32 and tsx.dtype == torch.float32
        assert np.array_equal(tq.reshape(9, -1).numpy().astype(np.int32), xq)
        assert np.array_equal(tsx.numpy(), s_x, equal_nan=True)
    # the documented special cases
    xq, s_x = reference.quantize_activations_int8_ref(x, k, block_size)
    assert np.isnan(s_x[0, 0]) and np.all(xq[0, :block_size] == 0)
    assert np.all(s_x[1] == 0) and np.all(xq[1] == 0)
    assert np.isnan(s_x[2, -1]) and np.all(np.isfinite(s_x[2, :-1]))
    assert s_x[6, 0] == 0 and np.all(xq[6, :block_size] == 0)
    # amax maps to +-127 and the scales are the float32 quotients of the spec
    amax = np.abs(x[3, :block_size]).max()
    assert s_x[3, 0] == np.float32(amax) / np.float32(127) and np.abs(xq[3, :block_size]).max() == 127
    assert np.all(s_x[5] == 1)  # 127 / 127
    ties = x[5, :k] != 127
    assert np.array_equal(xq[5, :k][ties], 2 * np.round(x[5, :k][ties] / 2).astype(np.int32))  # half to even
    assert np.all(xq[5, :k][ties] % 2 == 0)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_int8_activations_nan_inf_and_zero_rows(dtype: str) -> None:
    q = _int4_layer(dtype, 32, False)
    with torch.no_grad():
        q.bias.copy_(torch.randn(48))
    x = torch.randn(6, 200)
    x[1, 7] = float("nan")
    x[2, 199] = float("inf")  # last (short) block
    x[3] = 0
    x[4, 40] = -float("inf")
    x = x.to(DTYPES[dtype])
    y = q(x)
    nan_rows = torch.isnan(y).all(dim=1)
    assert nan_rows.tolist() == [False, True, True, False, True, False]
    assert torch.isfinite(y[[0, 3, 5]]).all()
    assert torch.equal(y[3], q.bias)  # all-zero row: exactly the bias
    y_ref, mag = _ref(q, x, 4)
    reference.assert_within_limit(_np(y), y_ref, mag, dtype, INT4_OP)


@pytest.mark.parametrize("block_size,symmetric", [(16, False), (32, True), (128, True)])
def test_int8_activations_really_quantize_within_x_rounding(block_size: int, symmetric: bool) -> None:
    """Level 4 differs from level 0, by no more than X's rounding (amax / 254 per element)."""
    q0 = _int4_layer("float32", block_size, symmetric, level=0)
    q4 = _int4_layer("float32", block_size, symmetric, level=4)
    assert torch.equal(q0.qweight, q4.qweight) and torch.equal(q0.scales, q4.scales)  # same weights
    x = torch.randn(16, 200) * torch.linspace(0.1, 10, 200)
    y0, y4 = q0(x), q4(x)
    w = q0.dequantized_weight().abs()  # [N, K]
    nb = -(-200 // block_size)
    xb = torch.nn.functional.pad(x.abs(), (0, nb * block_size - 200)).reshape(16, nb, block_size)
    amax = xb.amax(dim=2).repeat_interleave(block_size, dim=1)[:, :200]  # [M, K]
    bound = (amax / 254) @ w.t() * (1 + 1e-3) + 1e-5 * (x.abs() @ w.t()) + 1e-6
    diff = (y4 - y0).abs()
    assert (diff > 0).float().mean() > 0.9  # it is really quantizing
    assert (diff <= bound).all(), float((diff - bound).max())
    # ... and the difference is of X's rounding size, not much smaller
    assert float(diff.max()) > 0.1 * float(bound.max())


def test_int4_config_accuracy_level() -> None:
    for bad in (-1, 5, 8, 4.0, "4", True, None):
        with pytest.raises(ValueError, match="accuracy_level must be an int in \\[0, 4\\]"):
            Int4Config(accuracy_level=bad)
    for level in range(5):
        cfg = Int4Config(64, False, "gptq", accuracy_level=level)
        assert config_from_dict(QuantizeConfig(default=cfg).to_dict()).default == cfg
    assert Int4Config().accuracy_level == 0 and "a8" not in Int4Config().describe()
    assert Int4Config(accuracy_level=4).describe() == "int4 b128 sym a8 rtn"
    assert "acc2" in Int4Config(accuracy_level=2).describe()
    # configs saved before the attribute existed load as level 0
    d = QuantizeConfig(default=Int4Config(32)).to_dict()
    del d["default"]["accuracy_level"]
    assert config_from_dict(d).default == Int4Config(32)
    with pytest.raises(ValueError, match="accuracy_level"):
        torch.ops.pyquant.matmul_int4(
            torch.randn(2, 32),
            torch.zeros(4, 1, 16, dtype=torch.uint8),
            torch.ones(4, 1),
            None,
            None,
            32,
            4,
            32,
            5,
        )


def test_int8_activation_module_repr_and_checkpoint(tmp_path) -> None:
    torch.manual_seed(0)
    cfg = QuantizeConfig(default=Int4Config(32, accuracy_level=4), overrides={"down": Int4Config(16)})
    m = quantize(Mlp(), cfg)
    assert "a8" in repr(m.up) and "a8" not in repr(m.down)
    x = torch.randn(4, 96)
    y = m(x)
    save_quantized(m, tmp_path / "q.pt")
    loaded = load_quantized(Mlp(), tmp_path / "q.pt")
    assert loaded.up.config.accuracy_level == 4 and loaded.down.config.accuracy_level == 0
    torch.testing.assert_close(loaded(x), y, atol=0, rtol=0)
    # the level is not part of the state: the same buffers load into a level-0 model
    plain = quantize(Mlp(), QuantizeConfig(default=Int4Config(32), overrides={"down": Int4Config(16)}))
    plain.load_state_dict(m.state_dict())
    assert not torch.equal(plain(x), y)
    torch.testing.assert_close(plain(x), y, atol=0.05, rtol=0.05)
