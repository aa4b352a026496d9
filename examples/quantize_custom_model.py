"""The pass on any nn.Module: choose layers, save/load the packed checkpoint, export, run in ORT."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn

import pyquant.ort
from pyquant.config import Fp8Config, Int4Config, QuantizeConfig
from pyquant.export import export
from pyquant.quantize import load_quantized, quantize, save_quantized


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(256, 512)
        self.fc2 = nn.Linear(512, 256)
        self.head = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


torch.manual_seed(0)
calibration = [torch.randn(32, 256) for _ in range(4)]
config = QuantizeConfig(
    default=Int4Config(block_size=64, symmetric=False),
    exclude=["head"],  # keep the classifier in float
    overrides={"fc2": Fp8Config(weight_block_size=128, activation="static")},  # static scale: calibrated
)
model = quantize(Net().eval(), config, calibration_data=calibration)
save_quantized(model, "net-q.pt")
model = load_quantized(Net().eval(), "net-q.pt")  # same packed buffers, no re-quantization

print(export(model, (torch.randn(4, 256),), "net-q.onnx"))
sess = pyquant.ort.make_session("net-q.onnx")
x = torch.randn(7, 256)
y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
print("max |ORT - torch|:", float(np.abs(y - model(x).detach().numpy()).max()))
