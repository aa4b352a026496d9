"""torch._scaled_mm (cuBLASLt FP8, per-tensor scales, X already e4m3, fp16 out) at PROFILE_M x
PROFILE_SHAPE (K x N), run a few times: the cuBLASLt side of bench/device/ncu_fp8_gemm.sh."""

import os

import torch

k, n = (int(v) for v in os.environ.get("PROFILE_SHAPE", "14336x4096").split("x"))
m = int(os.environ.get("PROFILE_M", "2048"))
x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
w = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)
one = torch.ones((), device="cuda")
for _ in range(4):
    torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.float16)
torch.cuda.synchronize()
print("done")
