"""Quantization configs: what to do with one layer (Int4Config / Fp8Config) and with a model
(QuantizeConfig: a default scheme, include/exclude globs, a filter function, per-layer overrides).

Configs are frozen dataclasses validated on construction, so a bad value fails where it is written,
not deep inside the pass. ``to_dict`` / ``config_from_dict`` make them JSON round-trippable (the CLI
stores the config next to a quantized checkpoint).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch.nn as nn

from pyquant.layout import INT4_MAX_BLOCK, INT4_MIN_BLOCK
from pyquant.ops_spec import INT4_ACCURACY_LEVELS, INT4_INT8_ACTIVATIONS

__all__ = [
    "Int4Config",
    "Fp8Config",
    "LayerConfig",
    "QuantizeConfig",
    "config_from_dict",
]


def _is_pow2(v: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


@dataclass(frozen=True)
class Int4Config:
    """Block-wise 4-bit weight-only quantization (``pyquant::MatMulInt4``).

    block_size: K elements sharing one scale (power of two, 16..256); K need not be a multiple.
    symmetric: True -> zero point fixed at 8 (no zero_points input); False -> per-block zero points.
    algorithm: name of a registered weight quantizer (``pyquant.algorithms``), "rtn" by default:
        "rtn" round to nearest; "mse" per-block clipping search (no calibration); "gptq" GPTQ
        (calibration data); "awq" / "awq-gptq" activation-aware scale migration folded into the
        preceding norm / linear (a model-level pre-pass of ``pyquant.quantize``, calibration data),
        then the clipping search / GPTQ. Memory: GPTQ keeps a float32 [K, K] sum of x x^T per
        distinct layer input, all at once in one pass (a 7B Llama: ~22 GB), one group at a time with
        ``QuantizeConfig(sequential=True)``; the AWQ pre-pass keeps them for one decoder block at a
        time where the blocks replay (~0.7 GB).
    gptq_damp: GPTQ damping, relative to the mean Hessian diagonal (0 < damp <= 1).
    act_order: GPTQ processes columns by decreasing Hessian diagonal (scales stay per K block).
    clip_grid: shrink factors tried by the clipping search of "mse", "awq" and GPTQ's block scales
        (evenly spaced in [0.5, 1]); 0 -> plain min/max range (RTN scales).
    accuracy_level: the MatMulInt4 attribute (values of ORT's MatMulNBits), 0..4. 0-3: activations
        stay float32; 4: activations are quantized to int8 per row and K block at run time (faster
        on the CPU EP, less accurate; the CUDA EP and the weights are unaffected). The torch module
        computes with the CPU EP's numerics.
    """

    block_size: int = 128
    symmetric: bool = True
    algorithm: str = "rtn"
    gptq_damp: float = 0.01
    act_order: bool = False
    clip_grid: int = 20
    accuracy_level: int = 0
    scheme: Literal["int4"] = field(default="int4", init=False)

    def __post_init__(self) -> None:
        if not (_is_pow2(self.block_size) and INT4_MIN_BLOCK <= self.block_size <= INT4_MAX_BLOCK):
            raise ValueError(
                f"Int4Config.block_size must be a power of two in [{INT4_MIN_BLOCK}, {INT4_MAX_BLOCK}], "
                f"got {self.block_size!r}"
            )
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"Int4Config.symmetric must be a bool, got {self.symmetric!r}")
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ValueError(f"Int4Config.algorithm must be a non-empty str, got {self.algorithm!r}")
        d = self.gptq_damp
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0.0 < d <= 1.0:
            raise ValueError(f"Int4Config.gptq_damp must be a float in (0, 1], got {d!r}")
        if not isinstance(self.act_order, bool):
            raise ValueError(f"Int4Config.act_order must be a bool, got {self.act_order!r}")
        g = self.clip_grid
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g <= 1000:
            raise ValueError(f"Int4Config.clip_grid must be an int in [0, 1000], got {g!r}")
        a = self.accuracy_level
        if isinstance(a, bool) or not isinstance(a, int) or a not in INT4_ACCURACY_LEVELS:
            raise ValueError(
                f"Int4Config.accuracy_level must be an int in [0, 4] (0-3: float activations, "
                f"{INT4_INT8_ACTIVATIONS}: int8 activations), got {a!r}"
            )

    def describe(self) -> str:
        s = f"int4 b{self.block_size} {'sym' if self.symmetric else 'asym'}"
        if self.accuracy_level == INT4_INT8_ACTIVATIONS:
            s += " a8"
        elif self.accuracy_level != 0:
            s += f" acc{self.accuracy_level}"
        s += f" {self.algorithm}"
        if "gptq" in self.algorithm:
            s += f" damp {self.gptq_damp:g}" + (" act-order" if self.act_order else "")
        if self.algorithm != "rtn" and self.clip_grid != 20:
            s += f" clip-grid {self.clip_grid}"
        return s


@dataclass(frozen=True)
class Fp8Config:
    """FP8 e4m3fn weights and activations (``pyquant::LinearFp8``).

    weight_block_size: 0 -> one weight scale per output channel; else a power of two >= 16 ->
        one scale per block of that many K elements (finer scales, less weight error).
    activation: "dynamic" -> per-token scale computed at run time (amax / 448);
        "static" -> one calibrated per-tensor scale per layer (needs calibration data);
        "none" -> weight-only FP8 (W8A16, the op's ``weight_only=1``): activations stay in the
        model's dtype. No activation rounding error (on SmolLM2 that alone is +1.2 % perplexity),
        the same 1 byte per weight; no FP8 tensor-core math (docs/ops.md, "Weight-only").
    calibration: how a static scale is calibrated (``pyquant.calibration``), x_scale = clip / 448:
        "amax" (default) clip = max |x| seen; "percentile" clip = the ``percentile``-th percentile
        of |x| (outliers saturate); "mse" clip minimising the FP8 quantization MSE of the observed
        activations over a grid of shrink factors of amax. Only for activation="static".
    percentile: the percentile (in (0, 100]) used by calibration="percentile".
    """

    weight_block_size: int = 0
    activation: Literal["dynamic", "static", "none"] = "dynamic"
    algorithm: str = "rtn"
    calibration: Literal["amax", "percentile", "mse"] = "amax"
    percentile: float = 99.99
    scheme: Literal["fp8"] = field(default="fp8", init=False)

    def __post_init__(self) -> None:
        bs = self.weight_block_size
        if not (bs == 0 or (_is_pow2(bs) and bs >= 16)):
            raise ValueError(
                f"Fp8Config.weight_block_size must be 0 (per channel) or a power of two >= 16, got {bs!r}"
            )
        if self.activation not in ("dynamic", "static", "none"):
            raise ValueError(
                "Fp8Config.activation must be 'dynamic', 'static' or 'none' (weight-only), "
                f"got {self.activation!r}"
            )
        if self.calibration not in ("amax", "percentile", "mse"):
            raise ValueError(
                f"Fp8Config.calibration must be 'amax', 'percentile' or 'mse', got {self.calibration!r}"
            )
        if self.calibration != "amax" and self.activation != "static":
            raise ValueError(
                f"Fp8Config.calibration={self.calibration!r} calibrates a static activation scale; "
                "it needs activation='static'"
            )
        p = self.percentile
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p <= 100.0:
            raise ValueError(f"Fp8Config.percentile must be a float in (0, 100], got {p!r}")

    def describe(self) -> str:
        w = "per-channel" if self.weight_block_size == 0 else f"w-block {self.weight_block_size}"
        act = "weight-only" if self.activation == "none" else self.activation
        if act == "static" and self.calibration != "amax":
            act += f" {self.calibration}" + (
                f" p{self.percentile:g}" if self.calibration == "percentile" else ""
            )
        return f"fp8 {w} {act} {self.algorithm}"


LayerConfig = Int4Config | Fp8Config | None  # None: keep the layer in float

LayerFilter = Callable[[str, nn.Module], bool]


@dataclass
class QuantizeConfig:
    """Which nn.Linear layers to quantize, and how.

    A layer named ``name`` (its ``model.named_modules()`` name) gets, in order of precedence:
      1. ``overrides[name]``, or the first ``overrides`` key that is a glob matching ``name``
         (a value of None keeps that layer in float);
      2. nothing (float) if it matches no ``include`` glob, matches an ``exclude`` glob, or
         ``filter(name, module)`` returns False;
      3. ``default``.

    smoothing: None, or a SmoothQuant migration strength in [0, 1] (or "auto": chosen per layer group
    by simulated FP8 output error) applied by ``pyquant.quantize`` before quantizing, folded into the
    float model (``pyquant.smooth``; needs calibration data). Only groups feeding an FP8 layer are
    smoothed.

    sequential: False -> every layer's calibration statistics (GPTQ's Hessian, static FP8 ranges, ...)
    come from one pass of the float model. True -> GPTQ's sequential mode: the layers are quantized
    in groups (layers reading the same input tensor, e.g. q/k/v), in the order the forward pass calls
    them, and each group's statistics come from a pass over the calibration data with every earlier
    group already quantized, so a layer is fitted to the inputs it will see in the quantized model.
    About (groups / 2) forward passes over the calibration data (each pass stops after its group).

    awq_prescale: None, or an Int4Config: AWQ's pre-pass over every layer in scope (``include`` /
    ``exclude`` / ``filter``, whatever its own config, float included), its scales searched as if the
    layer were INT4 with this config, before the layers are quantized with their own configs. For
    mixed-precision plans (``pyquant.planner``), whose groups mix INT4, FP8 and float layers, so that
    per-layer "awq" algorithms would leave them unscaled; the float function is unchanged. Needs
    calibration data; exclusive with per-layer "awq" / "awq-gptq" algorithms.
    """

    default: LayerConfig = field(default_factory=Int4Config)
    include: Sequence[str] = ("*",)
    exclude: Sequence[str] = ()
    overrides: Mapping[str, LayerConfig] = field(default_factory=dict)
    filter: LayerFilter | None = None
    smoothing: float | str | None = None
    sequential: bool = False
    awq_prescale: Int4Config | None = None

    def __post_init__(self) -> None:
        if self.awq_prescale is not None and not isinstance(self.awq_prescale, Int4Config):
            raise ValueError(
                f"QuantizeConfig.awq_prescale must be None or an Int4Config, got {self.awq_prescale!r}"
            )
        if not isinstance(self.sequential, bool):
            raise ValueError(f"QuantizeConfig.sequential must be a bool, got {self.sequential!r}")
        sm = self.smoothing
        if sm is not None and sm != "auto":
            if isinstance(sm, bool) or not isinstance(sm, (int, float)) or not 0.0 <= sm <= 1.0:
                raise ValueError(
                    f"QuantizeConfig.smoothing must be None, 'auto' or a float in [0, 1], got {sm!r}"
                )
        if isinstance(self.include, str) or isinstance(self.exclude, str):
            raise ValueError("QuantizeConfig.include / exclude must be sequences of glob patterns, not a str")
        for cfg in [self.default, *self.overrides.values()]:
            if cfg is not None and not isinstance(cfg, (Int4Config, Fp8Config)):
                raise ValueError(f"layer configs must be Int4Config, Fp8Config or None, got {cfg!r}")

    def out_of_scope(self, name: str, module: nn.Module) -> str | None:
        """Why ``include`` / ``exclude`` / ``filter`` keep the layer out (overrides and default aside),
        or None when they admit it."""
        if not any(fnmatch.fnmatchcase(name, p) for p in self.include):
            return "not matched by include"
        for p in self.exclude:
            if fnmatch.fnmatchcase(name, p):
                return f"excluded by {p!r}"
        if self.filter is not None and not self.filter(name, module):
            return "rejected by filter"
        return None

    def for_layer(self, name: str, module: nn.Module) -> tuple[LayerConfig, str]:
        """-> (config or None, why) for one layer."""
        if name in self.overrides:
            return self.overrides[name], "override"
        for pattern, cfg in self.overrides.items():
            if fnmatch.fnmatchcase(name, pattern):
                return cfg, f"override {pattern!r}"
        why = self.out_of_scope(name, module)
        return (None, why) if why is not None else (self.default, "default")

    def to_dict(self) -> dict[str, Any]:
        if self.filter is not None:
            raise ValueError("a QuantizeConfig with a filter function cannot be serialized")
        return {
            "default": _layer_to_dict(self.default),
            "include": list(self.include),
            "exclude": list(self.exclude),
            "overrides": {k: _layer_to_dict(v) for k, v in self.overrides.items()},
            "smoothing": self.smoothing,
            "sequential": self.sequential,
            "awq_prescale": _layer_to_dict(self.awq_prescale),
        }


def _layer_to_dict(cfg: LayerConfig) -> dict[str, Any] | None:
    return None if cfg is None else asdict(cfg)


def _layer_from_dict(d: Mapping[str, Any] | None) -> LayerConfig:
    if d is None:
        return None
    d = dict(d)
    scheme = d.pop("scheme", None)
    if scheme == "int4":
        return Int4Config(**d)
    if scheme == "fp8":
        return Fp8Config(**d)
    raise ValueError(f"unknown quantization scheme {scheme!r} (expected 'int4' or 'fp8')")


def config_from_dict(d: Mapping[str, Any]) -> QuantizeConfig:
    """Inverse of ``QuantizeConfig.to_dict``."""
    return QuantizeConfig(
        default=_layer_from_dict(d.get("default")),
        include=tuple(d.get("include", ("*",))),
        exclude=tuple(d.get("exclude", ())),
        overrides={k: _layer_from_dict(v) for k, v in d.get("overrides", {}).items()},
        smoothing=d.get("smoothing"),
        sequential=d.get("sequential", False),
        awq_prescale=_layer_from_dict(d.get("awq_prescale")),
    )


def as_quantize_config(config: QuantizeConfig | Int4Config | Fp8Config) -> QuantizeConfig:
    if isinstance(config, QuantizeConfig):
        return config
    if isinstance(config, (Int4Config, Fp8Config)):
        return QuantizeConfig(default=config)
    raise ValueError(f"expected a QuantizeConfig, Int4Config or Fp8Config, got {type(config).__name__}")
