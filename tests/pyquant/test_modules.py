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
@pytest.mark.parametrize("wbs,activation", [(0, "dynamic"), (128, "dynamic"), (32, "static"), (0, "static")])
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
    y_ref, mag = reference.linear_fp8_ref(_np(x), w8, q.w_scale.numpy(), wbs, xs, _np(q.bias))
    reference.assert_within_limit(_np(y), y_ref, mag, dtype, FP8_OP)


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
