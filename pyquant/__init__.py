"""pyquant: block INT4 and FP8 linear layers for ONNX Runtime (CPU and CUDA), and the PyTorch pass
that quantizes a model and exports it to them."""

from __future__ import annotations

from pyquant import ort
from pyquant._library import build_info, get_library_path
from pyquant.algorithms import CalibrationStats, Fp8Packed, Int4Packed, register_weight_quantizer
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig, config_from_dict
from pyquant.export import ExportError, ExportReport, custom_translation_table, export, verify_onnx_model
from pyquant.export_lm import export_causal_lm
from pyquant.modules import Fp8Linear, Int4Linear
from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP
from pyquant.quantize import QuantizeSummary, load_quantized, quantize, save_quantized

__version__ = "0.1.0"

__all__ = [
    "DOMAIN",
    "FP8_OP",
    "INT4_OP",
    "CalibrationStats",
    "ExportError",
    "ExportReport",
    "Fp8Config",
    "Fp8Linear",
    "Fp8Packed",
    "Int4Config",
    "Int4Linear",
    "Int4Packed",
    "QuantizeConfig",
    "QuantizeSummary",
    "__version__",
    "build_info",
    "config_from_dict",
    "custom_translation_table",
    "export",
    "export_causal_lm",
    "get_library_path",
    "load_quantized",
    "ort",
    "quantize",
    "register_weight_quantizer",
    "save_quantized",
    "verify_onnx_model",
]
