"""pyquant: block INT4 and FP8 linear layers for ONNX Runtime (CPU and CUDA), and the PyTorch pass
that quantizes a model and exports it to them."""

from __future__ import annotations

from pyquant._library import build_info, get_library_path
from pyquant.ops_spec import DOMAIN, FP8_OP, INT4_OP

__version__ = "0.1.0"

__all__ = ["DOMAIN", "FP8_OP", "INT4_OP", "__version__", "build_info", "get_library_path"]
