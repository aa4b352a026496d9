"""Tiny randomly initialised Hugging Face models shared by the tests (one place for the config
boilerplate; each test states only what it needs to differ)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn


def tiny_llama(*, eager: bool = True, seed: int = 0, **config) -> nn.Module:
    """LlamaForCausalLM in eval mode: 64 hidden, 4 heads over 2 kv heads (GQA), 2 layers, vocab
    128, 64 positions, unless ``config`` overrides a field. ``eager``: eager attention (exports
    and hooks see plain ops); False keeps transformers' default."""
    transformers = pytest.importorskip("transformers")
    fields = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    fields.update(config)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**fields)).eval()
    if eager:
        model.config._attn_implementation = "eager"
    return model
