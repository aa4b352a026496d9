"""Quantize a model, export it to ONNX with pyquant ops, run it in ONNX Runtime, compare with PyTorch.

python examples/quantize_export_run.py            # all-MiniLM-L6-v2 (models/install.sh)
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import pyquant.ort
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig
from pyquant.export import export
from pyquant.models import get_recipe
from pyquant.quantize import quantize

recipe = get_recipe("minilm")
model, tokenizer = recipe.load()  # float32 HF BertModel, eval mode

# INT4 (block 128, symmetric) everywhere, but FP8 with per-token activation scales for the FFN output.
config = QuantizeConfig(
    default=Int4Config(block_size=128, symmetric=True),
    overrides={"*.output.dense": Fp8Config(weight_block_size=0, activation="dynamic")},
)
qmodel = quantize(copy.deepcopy(model), config)
print(qmodel.pyquant_summary.table())

wrapped = recipe.wrap(qmodel)  # (input_ids, attention_mask) -> last_hidden_state
enc = tokenizer(
    ["pyquant exports packed weights.", "ONNX Runtime runs them."], padding=True, return_tensors="pt"
)
report = export(
    wrapped, {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}, "minilm-q.onnx"
)
print(report)

session = pyquant.ort.make_session("minilm-q.onnx", providers=("cpu",))
feeds = {"input_ids": enc["input_ids"].numpy(), "attention_mask": enc["attention_mask"].numpy()}
y_ort = session.run(None, feeds)[0]
with torch.no_grad():
    y_torch = wrapped(enc["input_ids"], enc["attention_mask"]).numpy()
    y_float = recipe.wrap(model)(enc["input_ids"], enc["attention_mask"]).numpy()
print("max |ORT - torch quantized|:", float(np.abs(y_ort - y_torch).max()))
cos = (y_ort * y_float).sum(-1) / (np.linalg.norm(y_ort, axis=-1) * np.linalg.norm(y_float, axis=-1))
print("mean cosine(quantized ORT, float torch) per token:", float(cos.mean()))
