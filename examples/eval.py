"""Evaluate float PyTorch vs the quantized ONNX export in ONNX Runtime on a recipe's metric.

    python examples/eval.py                 # MiniLM, int4 + fp8: BBC accuracy, cosine, latency
    python examples/eval.py smollm2 fp8     # SmolLM2 wiki perplexity, FP8
Same as `pyquant eval --model <model> --scheme <scheme>`.
"""

from __future__ import annotations

import sys

from pyquant.eval import evaluate, format_table

model = sys.argv[1] if len(sys.argv) > 1 else "minilm"
schemes = sys.argv[2:] or ["int4", "fp8"]
results = evaluate(model, schemes, runtime="ort", providers=("cpu",), speed=True)
print(format_table(results))
