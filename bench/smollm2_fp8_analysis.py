"""Where SmolLM2's FP8 perplexity loss comes from (torch eager, pyquant op numerics).

    python bench/smollm2_fp8_analysis.py

Simulates LinearFp8 layer by layer (weights: RTN FP8 dequantized to float32; activations: the
bit-exact per-token FP8 quantization of pyquant.torch_ops) so that the weight and activation parts can
be switched on separately. lm_head stays float (recipe). Wiki slice: 8 x 512 tokens (recipe default).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from pyquant import torch_ops
from pyquant.algorithms import get_weight_quantizer
from pyquant.config import Fp8Config
from pyquant.models import get_recipe
from pyquant.models.data import wiki_token_sequences
from pyquant.models.metrics import perplexity, torch_forward


def act_fp8(x: torch.Tensor) -> torch.Tensor:
    xq, s = torch_ops.quantize_activations_fp8(x.reshape(-1, x.shape[-1]), None)
    return (xq.float() * s).reshape(x.shape).to(x.dtype)


def simulate(model: nn.Module, weight_block: int | None, activations: bool) -> nn.Module:
    q = copy.deepcopy(model)
    fn, _ = get_weight_quantizer("fp8", "rtn")
    for name, mod in q.named_modules():
        if isinstance(mod, nn.Linear) and name != "lm_head":
            if weight_block is not None:
                p = fn(mod.weight.data, Fp8Config(weight_block_size=weight_block), None)
                mod.weight.data = torch_ops.dequantize_fp8(p.weight, p.w_scale, weight_block)
            if activations:
                mod.register_forward_pre_hook(lambda m, a: (act_fp8(a[0]),))
    return q


def main() -> None:
    recipe = get_recipe("smollm2")
    model, tok = recipe.load()
    ids = wiki_token_sequences(tok, 8, 512)
    base = perplexity(torch_forward(recipe.wrap(model)), ids, 2)
    print(f"float                                ppl {base:.4f}")
    for label, wb, act in [
        ("weights only, per-channel", 0, False),
        ("weights only, block 128", 128, False),
        ("weights only, block 32", 32, False),
        ("activations only (per token)", None, True),
        ("weights per-channel + activations", 0, True),
        ("weights block 128 + activations", 128, True),
    ]:
        p = perplexity(torch_forward(recipe.wrap(simulate(model, wb, act))), ids, 2)
        print(f"{label:36s} ppl {p:.4f}  {100 * (p / base - 1):+.2f}%")


if __name__ == "__main__":
    main()
