"""Where SmolLM2's FP8 perplexity loss comes from (torch eager, pyquant op numerics).

    python bench/smollm2_fp8_analysis.py                 # weight / activation split
    python bench/smollm2_fp8_analysis.py --subnormal     # share of FP8 activations in e4m3 subnormals
    python bench/smollm2_fp8_analysis.py --scheme fp8-sq0.2 --scheme fp8-gptq   # smoothing / GPTQ

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


def subnormal_stats(model: nn.Module, batches: list) -> None:
    """Per layer kind: share of nonzero activations that the per-token scale puts below the e4m3
    normal range (|x| / amax * 448 < 2^-6) or flushes to zero (< 2^-10), and their share of sum x^2."""
    tot: dict[str, list[float]] = {}

    def hook(name: str):  # noqa: ANN202
        def h(m: nn.Module, a: tuple) -> None:
            x = a[0].detach().reshape(-1, m.in_features).float()
            r = x.abs() / x.abs().amax(1, keepdim=True).clamp(min=1e-30) * 448
            nz = x != 0
            t = tot.setdefault(name.rsplit(".", 1)[-1], [0, 0, 0, 0.0])
            t[0] += x.numel()
            t[1] += float(((r < 2**-6) & nz).sum())
            t[2] += float(((r < 2**-10) & nz).sum())
            t[3] = max(t[3], float((x.pow(2) * (r < 2**-6)).sum() / x.pow(2).sum()))

        return h

    hs = [m.register_forward_pre_hook(hook(n)) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for b in batches:
            model(**b)
    for h in hs:
        h.remove()
    for k, (n, sub, zero, e) in tot.items():
        print(f"{k:10s} subnormal {100 * sub / n:.3f} %  flushed {100 * zero / n:.4f} %  x^2 share {e:.1e}")


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--subnormal", action="store_true")
    ap.add_argument("--scheme", action="append", default=[], help="recipe scheme, e.g. fp8-sq0.2, fp8-gptq")
    args = ap.parse_args()
    recipe = get_recipe("smollm2")
    model, tok = recipe.load()
    calib = [
        {"input_ids": torch.from_numpy(c), "attention_mask": torch.ones(c.shape, dtype=torch.int64)}
        for c in wiki_token_sequences(tok, 4, 512, offset_seqs=8).reshape(2, 2, 512)
    ]  # = pyquant eval's calibration batches
    if args.subnormal:
        subnormal_stats(model, calib[:1])
        return
    ids = wiki_token_sequences(tok, 8, 512)
    base = perplexity(torch_forward(recipe.wrap(model)), ids, 2)
    print(f"float                                ppl {base:.4f}")
    if args.scheme:
        from pyquant.quantize import quantize

        for sch in args.scheme:
            q = quantize(copy.deepcopy(model), recipe.quantize_config(sch), calibration_data=calib)
            p = perplexity(torch_forward(recipe.wrap(q)), ids, 2)
            print(f"{sch:36s} ppl {p:.4f}  {100 * (p / base - 1):+.2f}%")
        return
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
