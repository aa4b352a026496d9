"""bench/smollm2_fp8_diagnose.py: its simulated layer has LinearFp8's numerics (no model needed)."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

from bench import smollm2_fp8_diagnose  # the script as a module (pyproject: pythonpath = ["."])
from pyquant import quantize
from pyquant.config import Fp8Config


def test_sim_matches_fp8_linear() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(96, 64, bias=False), nn.ReLU(), nn.Linear(64, 32, bias=False))
    x = torch.randn(5, 96) * torch.linspace(0.1, 8.0, 96)
    net2 = copy.deepcopy(net)
    sim = smollm2_fp8_diagnose.install(net2)
    assert set(sim) == {"0", "2"}
    with torch.no_grad():
        ref = net(x)
        assert torch.equal(net2(x), ref)  # both parts off: the float layer
        for s in sim.values():
            s.fp8_w = s.fp8_a = True
        got = net2(x)
        want = quantize(net, Fp8Config(weight_block_size=0))(x)  # pyquant::linear_fp8 numerics
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, ref, rtol=1e-4, atol=1e-4)
