"""Graph patterns ONNX Runtime fuses, made to appear in the exported graph.

RMSNorm (Llama, Mistral, Qwen2, SmolLM2, ...) is written in transformers as
``x * torch.rsqrt(mean(x^2) + eps)``, which exports as Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul
(and Casts around them in float16). ORT's SimplifiedLayerNormFusion (a level-2 graph optimization
on the CPU and CUDA EPs, on by default) looks for ``x / sqrt(mean(x^2) + eps)``, the Div form, and
replaces the whole chain and the weight's Mul with one SimplifiedLayerNormalization node. So during
export each RMSNorm runs the Div form of the same arithmetic: per norm ~6 nodes become 1 in the
session, twice per decoder layer, which matters where decode steps are bound by per-node cost.

A module is switched only if it looks like that RMSNorm (class name ending in "RMSNorm", a 1-D
``weight``, a float ``variance_epsilon`` or ``eps``) and the Div form gives its output on a random
input; anything else (Gemma's ``1 + weight``, other variants) keeps its own forward.
"""

from __future__ import annotations

import contextlib
import logging
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

log = logging.getLogger("pyquant")

__all__ = ["fusable_rms_norms"]


def _rms_norm_div_form(eps: float) -> Any:
    """RMSNorm's forward (self, hidden_states) in the Div form, for a module whose eps is ``eps``."""

    def forward(self: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return self.weight * h.to(dtype)

    return forward


def _eps(module: nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps"):
        v = getattr(module, name, None)
        if isinstance(v, float):
            return v
    return None


def _same_output(module: nn.Module, div_form: Any) -> bool:
    weight = module.weight
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 3, weight.shape[0], generator=g) * 3).to(weight.device, weight.dtype)
    try:
        with torch.no_grad():
            want = module(x)
            got = div_form(module, x)
    except Exception:  # noqa: BLE001 - a module we cannot run alone keeps its forward
        return False
    tol = 1e-5 if weight.dtype == torch.float32 else 1e-2
    return got.dtype == want.dtype and torch.allclose(got.float(), want.float(), rtol=tol, atol=tol)


@contextlib.contextmanager
def fusable_rms_norms(model: nn.Module) -> Iterator[int]:
    """Within the block, RMSNorm modules of ``model`` compute in the Div form ORT fuses (module
    docstring); yields how many were switched. Their own forward comes back on exit."""
    switched: list[nn.Module] = []
    try:
        for module in model.modules():
            weight = getattr(module, "weight", None)
            eps = _eps(module)
            if not (
                type(module).__name__.endswith("RMSNorm")
                and isinstance(weight, torch.Tensor)
                and weight.dim() == 1
                and eps is not None
                and "forward" not in vars(module)
            ):
                continue
            div_form = _rms_norm_div_form(eps)
            if _same_output(module, div_form):
                module.forward = types.MethodType(div_form, module)
                switched.append(module)
        if switched:
            log.debug("pyquant: %d RMSNorm modules exported in the form ORT fuses", len(switched))
        yield len(switched)
    finally:
        for module in switched:
            del module.forward
