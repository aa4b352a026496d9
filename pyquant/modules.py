"""Quantized replacements for nn.Linear whose buffers are exactly the ONNX op inputs.

Int4Linear  -> pyquant::MatMulInt4   buffers: qweight uint8 [N, n_blocks, bs/2], scales T [N, n_blocks],
                                     zero_points uint8 [N, ceil(n_blocks/2)] (asymmetric only), bias T [N]
Fp8Linear   -> pyquant::LinearFp8    buffers: weight float8_e4m3fn [N, K], w_scale float32 [N] or [N, nb],
                                     x_scale float32 [] (static only), bias T [N]

"T" is the activation dtype: ``model.half()`` / ``.to(torch.bfloat16)`` converts the scales and bias
with the model (the op requires them to have X's type). The FP8 weight and its float32 scales must
never follow such a cast (nn.Module.half() would turn any floating tensor, float8 included, into
float16), so Fp8Linear pins their dtypes in ``_apply`` and lets only device moves through.
"""

from __future__ import annotations

import math
from typing import TypeVar

import torch
import torch.nn as nn

from pyquant import torch_ops  # noqa: F401  (registers torch.ops.pyquant.*)
from pyquant.algorithms import Fp8Packed, Int4Packed
from pyquant.config import Fp8Config, Int4Config
from pyquant.layout import FP8_E4M3_MAX

__all__ = ["Int4Linear", "Fp8Linear", "QuantizedLinear"]

_Q = TypeVar("_Q", bound="_QuantLinearBase")


class _QuantLinearBase(nn.Module):
    """What both quantized layers share: construction (one path for the quantize pass, which fills
    the buffers from a quantizer's packed tensors, and for checkpoint loading, which builds empty
    layers that ``load_state_dict`` fills), input checks, size and repr. Subclasses register their
    packed buffers in ``_init_packed_buffers`` and copy a quantizer's result in ``_load_packed``."""

    in_features: int
    out_features: int
    layer_name: str

    def __init__(
        self,
        in_features: int,
        out_features: int,
        config: Int4Config | Fp8Config,
        bias: bool = False,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        layer_name: str = "",
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.config = config
        self.layer_name = layer_name
        self._init_packed_buffers(dtype, device)
        # Registered last, so the buffer order (state_dict, ONNX initializers) is the op's input order.
        self.register_buffer("bias", torch.zeros(out_features, dtype=dtype, device=device) if bias else None)

    def _init_packed_buffers(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        raise NotImplementedError

    def _load_packed(self, packed: Int4Packed | Fp8Packed) -> None:
        raise NotImplementedError

    @classmethod
    def like(cls: type[_Q], linear: nn.Linear, config: Int4Config | Fp8Config, layer_name: str = "") -> _Q:
        """An empty (zero / unit buffers) quantized layer with ``linear``'s shape, bias, dtype, device."""
        return cls(
            linear.in_features,
            linear.out_features,
            config,
            linear.bias is not None,
            linear.weight.dtype,
            linear.weight.device,
            layer_name,
        )

    @classmethod
    def from_packed(
        cls: type[_Q],
        linear: nn.Linear,
        packed: Int4Packed | Fp8Packed,
        config: Int4Config | Fp8Config,
        layer_name: str = "",
    ) -> _Q:
        """The quantized layer for ``linear``: the quantizer's packed tensors, ``linear``'s bias."""
        m = cls.like(linear, config, layer_name)
        m._load_packed(packed)
        if linear.bias is not None:
            with torch.no_grad():
                m.bias.copy_(linear.bias.detach())
        return m

    def _check_input(self, x: torch.Tensor, t_dtype: torch.dtype) -> None:
        if x.dtype not in torch_ops.ACTIVATION_DTYPES:
            raise ValueError(
                f"{type(self).__name__} {self.layer_name!r}: input dtype {x.dtype} is not supported "
                "(float32, float16 or bfloat16)"
            )
        if x.dtype != t_dtype:
            raise ValueError(
                f"{type(self).__name__} {self.layer_name!r}: input dtype {x.dtype} differs from the layer's "
                f"{t_dtype} scales/bias; convert the whole model with model.to({x.dtype})"
            )
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"{type(self).__name__} {self.layer_name!r}: expected input [..., {self.in_features}], "
                f"got {tuple(x.shape)}"
            )

    def packed_nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.buffers())

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"{self.config.describe()}, bias={self.bias is not None}"
        )


class Int4Linear(_QuantLinearBase):
    """Block-wise INT4 weight-only linear layer (numerics of pyquant::MatMulInt4).

    ``config.accuracy_level`` is passed to the op (and exported as the node's attribute): at 4 the
    input is quantized to int8 per row and K block, as on ORT's CPU EP. It is not a buffer, so a
    state_dict loads into a layer of any level.
    """

    config: Int4Config

    def _init_packed_buffers(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        bs = self.block_size = self.config.block_size
        n, nb = self.out_features, math.ceil(self.in_features / bs)
        self.register_buffer("qweight", torch.zeros(n, nb, bs // 2, dtype=torch.uint8, device=device))
        self.register_buffer("scales", torch.zeros(n, nb, dtype=dtype, device=device))
        zp = None
        if not self.config.symmetric:
            zp = torch.zeros(n, math.ceil(nb / 2), dtype=torch.uint8, device=device)
        self.register_buffer("zero_points", zp)

    @torch.no_grad()
    def _load_packed(self, p: Int4Packed) -> None:
        _check_shape(self, "qweight", p.qweight, self.qweight, torch.uint8)
        _check_shape(self, "scales", p.scales, self.scales, None)
        self.qweight.copy_(p.qweight)
        self.scales.copy_(p.scales.to(self.scales.dtype))
        if self.zero_points is not None:
            if p.zero_points is None:
                raise ValueError(f"Int4Linear {self.layer_name!r}: asymmetric config but no zero points")
            _check_shape(self, "zero_points", p.zero_points, self.zero_points, torch.uint8)
            self.zero_points.copy_(p.zero_points)
        elif p.zero_points is not None:
            raise ValueError(f"Int4Linear {self.layer_name!r}: symmetric config but zero points were given")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x, self.scales.dtype)
        return torch.ops.pyquant.matmul_int4(
            x,
            self.qweight,
            self.scales,
            self.zero_points,
            self.bias,
            self.in_features,
            self.out_features,
            self.block_size,
            self.config.accuracy_level,
        )

    def dequantized_weight(self) -> torch.Tensor:
        """Float32 [N, K] weight this layer computes with (for analysis / tests)."""
        return torch_ops.dequantize_int4(
            self.qweight, self.scales, self.zero_points, self.in_features, self.out_features, self.block_size
        )


class Fp8Linear(_QuantLinearBase):
    """FP8 e4m3fn linear layer (pyquant::LinearFp8) with per-token or static activation
    quantization, or weight-only (Fp8Config(activation="none"): activations not quantized)."""

    config: Fp8Config
    _PINNED = ("weight", "w_scale", "x_scale")

    def _init_packed_buffers(self, dtype: torch.dtype, device: torch.device | str | None) -> None:
        bs = self.block_size = self.config.weight_block_size
        n, k = self.out_features, self.in_features
        self.register_buffer("weight", torch.zeros(n, k, dtype=torch.float8_e4m3fn, device=device))
        ws_shape = (n,) if bs == 0 else (n, math.ceil(k / bs))
        self.register_buffer("w_scale", torch.ones(ws_shape, dtype=torch.float32, device=device))
        static = self.config.activation == "static"
        self.register_buffer(
            "x_scale", torch.ones((), dtype=torch.float32, device=device) if static else None
        )

    @classmethod
    def from_packed(
        cls,
        linear: nn.Linear,
        packed: Fp8Packed,
        config: Fp8Config,
        layer_name: str = "",
        input_amax: float | None = None,
    ) -> Fp8Linear:
        """As the base's, plus the calibrated activation clip value of a static config."""
        m = super().from_packed(linear, packed, config, layer_name)
        if config.activation == "static":
            if input_amax is None:
                raise ValueError(f"Fp8Linear {layer_name!r}: static activation scale needs calibration data")
            m.set_input_amax(input_amax)
        return m

    @torch.no_grad()
    def _load_packed(self, p: Fp8Packed) -> None:
        _check_shape(self, "weight", p.weight, self.weight, torch.float8_e4m3fn)
        _check_shape(self, "w_scale", p.w_scale, self.w_scale, torch.float32)
        self.weight.copy_(p.weight)
        self.w_scale.copy_(p.w_scale)

    @torch.no_grad()
    def set_input_amax(self, amax: float) -> None:
        """Static activation scale from the calibrated clip value of |x| (x_scale = amax / 448;
        larger |x| saturate). The clip is max |x| or, with Fp8Config.calibration, a smaller one."""
        if self.x_scale is None:
            raise ValueError(f"Fp8Linear {self.layer_name!r} uses dynamic activation scales")
        if not (math.isfinite(amax) and amax >= 0):
            raise ValueError(f"Fp8Linear {self.layer_name!r}: calibrated amax must be finite, got {amax}")
        scale = torch.tensor(amax, dtype=torch.float32) / FP8_E4M3_MAX if amax > 0 else torch.tensor(1.0)
        self.x_scale.copy_(scale)

    def _apply(self, fn, recurse=True):  # noqa: ANN001 - signature of nn.Module._apply
        # Let device moves through but keep the dtypes of the FP8 weight and float32 scales.
        pinned = {k: self._buffers[k] for k in self._PINNED if self._buffers.get(k) is not None}
        super()._apply(fn, recurse)
        for k, old in pinned.items():
            new = self._buffers[k]
            if new.dtype != old.dtype:
                self._buffers[k] = old.to(new.device)
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x, self.bias.dtype if self.bias is not None else x.dtype)
        return torch.ops.pyquant.linear_fp8(
            x, self.weight, self.w_scale, self.x_scale, self.bias, self.block_size, self.weight_only
        )

    @property
    def weight_only(self) -> bool:
        """The op's weight_only attribute: activations are not quantized."""
        return self.config.activation == "none"

    def dequantized_weight(self) -> torch.Tensor:
        return torch_ops.dequantize_fp8(self.weight, self.w_scale, self.block_size)


QuantizedLinear = (Int4Linear, Fp8Linear)


def _check_shape(mod: nn.Module, what: str, got: torch.Tensor, want: torch.Tensor, dtype) -> None:  # noqa: ANN001
    if tuple(got.shape) != tuple(want.shape) or (dtype is not None and got.dtype != dtype):
        raise ValueError(
            f"{type(mod).__name__} {getattr(mod, 'layer_name', '')!r}: {what} must be "
            f"{dtype or 'float'} {tuple(want.shape)}, the quantizer produced {got.dtype} {tuple(got.shape)}"
        )
